"""Talking to the controllers without grpcio: a unary gRPC client over HTTP/2 (grpcwire, hpack), the protobuf
codec for slurm.proto (protocodec), and the failover policy every client shares (failover, which
module_utils gets as a generated copy). Standard library only: the CLI imports this on every command.
"""
