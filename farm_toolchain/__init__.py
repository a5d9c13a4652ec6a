"""Code that runs only inside the toolchain environment (torch, litert-torch, the quantizer, the
builder, the runtime). It must never import prefect or the orchestrator package `farm`: the two
environments cannot share one resolver solution (typing-extensions: prefect needs >= 4.15,
litert-converter's xdsl pins < 4.13). The orchestrator calls it as

    <toolchain-python> -m farm_toolchain <command>   (JSON request on stdin)

and reads one JSON object from stdout. See farm_toolchain/protocol.py.
"""
