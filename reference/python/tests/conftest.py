import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # reference/python, so `import mla_ref` works without PYTHONPATH
