"""Sockets below HTTP: the upstream HTTP/1.1 client on llhttp (`upstream`: the pool; `exchange`:
one connection and the answer read on it; `origins`: where connections go and how many at
once; `sockets`: connecting, and CONNECT tunnels), its timeouts and failure kinds
(`transport`, `failures`), and the outbox that writes a loop turn's bytes together."""
