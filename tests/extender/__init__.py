"""Unit tests of the extender's pure core, one module per extender module."""
