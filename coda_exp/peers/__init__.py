"""Other implementations of CoDA attention, kept to be timed and checked against ours (``scripts/bench_gpu_coda.py``).

Nothing of the training path imports this package (``tests/test_layering.py``): a peer's library is an optional
extra, never a dependency of a run. ``keops_coda``: CoDA as a KeOps reduction (``pip install 'coda-exp[keops]'``).
"""
