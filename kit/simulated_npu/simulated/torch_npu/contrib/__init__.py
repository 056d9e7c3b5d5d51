"""SIMULATED ``torch_npu.contrib`` (see ``transfer_to_npu``)."""
