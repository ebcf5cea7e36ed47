"""CoDA's backends, one file each; which one runs is ``coda_exp.attention.dispatch``'s decision.

* ``numba_cpu``: numba CPU kernels of the pairwise L1 distance (eq. 2) and the fused composition (eqs. 1-5);
* ``l1``: the L1 distances as autograd functions (``numba_l1``, ``chunked_l1``, ``cdist_l1``);
* ``fused``: M in one numba pass (``fused_coda_matrix``);
* ``flash``: the Flash-CoDA op (M V, M never stored) on ``flash_cpu`` (numba, ``numba_flash``) or
  ``flash_triton`` (host side) with ``triton_jit`` (the Triton kernels) and ``triton_bwd`` (a fused backward).

Backends import only ``coda_exp.attention.activations``, ``coda_exp.attention.flash_spec`` and one another.
"""
