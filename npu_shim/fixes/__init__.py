"""One module per upstream verl change npu_shim carries, each declaring ``FIX`` (:mod:`npu_shim.catalogue`): its
docstring says which change it mirrors, how it tells that the change is missing, and what it does.
"""
