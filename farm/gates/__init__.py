"""The orchestrator's side of the gates: the `gates:` section of a build config (config.py) and the
suite that runs every registered gate on a file and records each result (suite.py). Each gate's
contract (settings, spec, request builder) is its module in farm_common/gates/; its measurement is
farm_toolchain/gates/<gate>.py."""
