"""The OpenAI-compatible policy server (``tracerl serve``): app, decoding engine, protocol, replies."""
