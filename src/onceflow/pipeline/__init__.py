"""A pipeline: what it is (``spec``), how a spec is found (``discovery``), the
objects that run it in a deployment (``runtime``), and an operator's split
or skip of a batch that keeps failing (``quarantine``)."""
