"""SIMULATED MindSpeed, from npu_shim.testing: NOT Huawei's MindSpeed, and no NPU kernel behind it.

It models what verl relies on, acting on the real megatron-core the way MindSpeed
does (see ``megatron_adaptor.repatch``): a persistent argument namespace, patches
removed and re-applied on each ``repatch``, context parallelism's wrapper around
``initialize_model_parallel`` that builds the ring state, and the duplicate-patch
error on ``DotProductAttention.forward``. It models nothing else of MindSpeed.
"""

SIMULATED = True
