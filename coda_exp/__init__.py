"""coda-exp: reproducing Compositional De-Attention Networks (CoDA) and Attentive Convolution (AttConv)."""

__version__ = "0.1.0"
