__version__ = "0.1.0"
PROTOCOL_VERSION = "0.3.2"  # the agent-reach protocol this package implements
