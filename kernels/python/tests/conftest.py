import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.dirname(HERE)                       # kernels/python: `import mla_door`
ROOT = os.path.dirname(os.path.dirname(PY))      # the source tree
for p in (os.path.join(PY, "examples"), PY):
    if p not in sys.path:
        sys.path.insert(0, p)
