"""The extender's unit tests import the synthetic cluster builders by this name; they live in
`testkit.builders`, shared with the benchmark."""

from testkit.builders import *  # noqa: F403
