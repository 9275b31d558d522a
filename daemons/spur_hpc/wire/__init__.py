"""Talking to the controllers without grpcio: a unary gRPC client over HTTP/2 (grpcwire, hpack), the protobuf
codec for slurm.proto (protocodec), and the failover policy every client shares (failover). Standard library
only and Python 3.8: the CLI imports this on every command, and the collection's module_utils hold generated
copies of every module here (tools/gen_module_utils.py), which run on the managed hosts' own Python.
"""
