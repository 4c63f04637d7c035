"""The verifier's gRPC server: the engine on its own thread, the Verifier service, metrics, tracing.

In-process: `VerifierServer(VerifierServerConfig(...))`, `await server.start()` (the bound port),
`await server.stop()`. From the command line: `treespec verifier` (treespec.shared.cli.verifier).
"""
