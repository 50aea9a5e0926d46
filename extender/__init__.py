"""The nativedra scheduler extender: gang all-or-nothing placement, topology domains, scoring."""
