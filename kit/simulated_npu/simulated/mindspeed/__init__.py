"""SIMULATED MindSpeed, from simulated_npu: NOT Huawei's MindSpeed, and no NPU kernel behind it.

It models what verl relies on, per MindSpeed line (``mindspeed.lines``: ``2.3.0_core_r0.12.1``
and ``f2b0977e``, ``core_r0.16.0``, ``core_r0.17.0``, ``core_r0.18.0``, master, ``2.1.0_core_r0.12.1``), acting on the
real megatron-core the way MindSpeed does (see ``megatron_adaptor.repatch``): a persistent
argument namespace, patches removed and re-applied on each ``repatch``, fusion and
batch-invariant attention and their duplicate-patch error, the generate-mask wrapper, and context parallelism's
attention class and wrapper around ``initialize_model_parallel`` that builds the ring
state. It models nothing else of MindSpeed.
"""

SIMULATED = True

from mindspeed import lines  # noqa: E402

if lines.current().megatron_adaptor_package:
    # core_r0.17.0 and core_r0.18.0: mindspeed/__init__.py is this import, for its side effects; without
    # MegatronAdaptor installed, `import mindspeed` fails here, as it does there
    import megatron_adaptor  # noqa: F401
