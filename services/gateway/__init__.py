"""The OpenAI-compatible HTTP gateway: tokenizes, talks to the verifier over gRPC, detokenizes.

`create_app(config)` (app.py) builds the FastAPI application; `treespec gateway` runs it on uvicorn.
"""
