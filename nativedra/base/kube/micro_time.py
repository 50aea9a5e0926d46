"""A MicroTime (a Lease's acquireTime and renewTime) as the API server parses it.

The typed client (kubernetes 37) turns a dict body into its model, and writes a datetime back with
`isoformat`, which leaves out the fraction when it is zero; the API server refuses a MicroTime
without one (400). So no stamp is written on a whole second: one microsecond later is the same
instant to every reader of a Lease.
"""

from __future__ import annotations

import datetime as dt


def micro_time(seconds: float) -> str:
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC)
    if not stamp.microsecond:
        stamp = stamp.replace(microsecond=1)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
