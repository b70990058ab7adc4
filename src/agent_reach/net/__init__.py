"""Sockets below HTTP: the upstream HTTP/1.1 client on llhttp (`upstream`), its timeouts and
failure kinds (`transport`), and the outbox that writes a loop turn's bytes together."""
