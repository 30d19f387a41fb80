"""Geometric anatomy of capability acquisition: a DVC pipeline.

The DVC stage scripts are ``stages/pipeline/`` (``python -m stages.pipeline.<name>``), thin
entries over the library: ``tasks``, ``models``, ``training``, ``measures``, ``analysis``, ``io`` and
``pythia``, with the settings shared by all (``params``, ``params_file``, ``config``, ``cli``, ``errors``, ``paths``,
``runtime``, ``numerics``) at the top. ``monitor`` and ``cluster`` sit beside the pipeline and import
only the library. Importing any of it changes no environment variable and no torch or numpy
setting; a stage applies ``params.yaml: runtime`` when it starts (stages/runtime.py).
"""
