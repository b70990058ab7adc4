__version__ = "0.2.0"
PROTOCOL_VERSION = "0.3.2"  # the agent-reach protocol this package implements
