"""SIMULATED MindSpeed, from npu_shim.testing: NOT Huawei's MindSpeed; it patches nothing.

Only ``mindspeed.megatron_adaptor.repatch`` exists, and it records its calls.
"""

SIMULATED = True
