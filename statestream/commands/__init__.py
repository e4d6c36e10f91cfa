"""The programs on top of the API: the ``statestream`` command line (``cli``, also
``python -m statestream``), ``statestream-python`` (``launcher``: runs a job as python would,
with its streams on statestream) and the seed query (``demo``). Nothing is imported here, so
``statestream --help`` stays fast.
"""
