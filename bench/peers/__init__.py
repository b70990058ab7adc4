"""agent-reach against its peers (`run`: the whole run and its options): installs, nginx, the
proxies under test, the scenarios, the report."""
