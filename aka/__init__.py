"""aka: an autonomous GPU-kernel optimization agent with a scorer that kernels cannot fool."""

__version__ = "0.1.0"
