"""Container Device Interface specs: model, minimum version, validation, atomic files.

No Kubernetes imports: this package only knows CDI.
"""
