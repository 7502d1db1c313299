"""Math with a calculator (the paper's Calc-X agent): an AutoGen AgentChat assistant trained by tracerl."""
