"""objfs_torch: another name of objfs.torch (PyTorch data loading through
the GPU side API), for programs that import it by this name."""
import sys

import objfs.torch

sys.modules[__name__] = objfs.torch
