"""The agent-side SDK: Agent Lightning's LitAgent, decorators, emitters and tracing, on voltbus."""
