# Tool versions, pinned. The two protoc plugins must match the runtime
# versions in go.mod (google.golang.org/protobuf and connectrpc.com/connect):
# `make generate` refuses to run otherwise. Bump them together with go.mod.
BUF_VERSION                   := v1.50.0
PROTOC_GEN_GO_VERSION         := v1.36.12
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
STATICCHECK_VERSION           := v0.8.2

# Tools are installed here, never into the user's GOBIN.
BIN := $(CURDIR)/.bin

# Reference for breaking-proto.
BREAKING_AGAINST ?= .git\#branch=main

.PHONY: all tools generate check-plugin-versions lint-proto breaking-proto test vet lint ui

all: vet lint test

# One stamp per tool and version: changing a version reinstalls that tool.
TOOL_STAMPS := $(BIN)/.buf@$(BUF_VERSION) \
	$(BIN)/.protoc-gen-go@$(PROTOC_GEN_GO_VERSION) \
	$(BIN)/.protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)

tools: $(TOOL_STAMPS)

$(BIN)/.buf@$(BUF_VERSION):
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@touch $@

$(BIN)/.protoc-gen-go@$(PROTOC_GEN_GO_VERSION):
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@touch $@

$(BIN)/.protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION):
	GOBIN=$(BIN) go install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)
	@touch $@

check-plugin-versions:
	@v=$$(go list -m -f '{{.Version}}' google.golang.org/protobuf); \
	test "$$v" = "$(PROTOC_GEN_GO_VERSION)" || \
	{ echo "PROTOC_GEN_GO_VERSION=$(PROTOC_GEN_GO_VERSION) but go.mod has google.golang.org/protobuf $$v" >&2; exit 1; }
	@v=$$(go list -m -f '{{.Version}}' connectrpc.com/connect); \
	test "$$v" = "$(PROTOC_GEN_CONNECT_GO_VERSION)" || \
	{ echo "PROTOC_GEN_CONNECT_GO_VERSION=$(PROTOC_GEN_CONNECT_GO_VERSION) but go.mod has connectrpc.com/connect $$v" >&2; exit 1; }

# Generated code is committed; running this twice changes nothing.
generate: check-plugin-versions tools
	PATH="$(BIN):$$PATH" buf generate

lint-proto: tools
	PATH="$(BIN):$$PATH" buf lint

# Wire and JSON compatibility of proto/ against BREAKING_AGAINST.
breaking-proto: tools
	PATH="$(BIN):$$PATH" buf breaking --against '$(BREAKING_AGAINST)'

# The server's module and the SDK's (sdk/, a module of its own; its pgx
# outbox writer, sdk/outboxpgx, another, tested from the server's).
test:
	go test -race ./...
	cd sdk && go test -race ./...

vet:
	go vet ./...
	cd sdk && go vet ./...
	cd sdk/outboxpgx && go vet ./...

lint:
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd sdk && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...
	cd sdk/outboxpgx && go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# The dashboard (docs/guides/dashboard.md): the TypeScript client generated
# from proto/tenure/v1 into clients/ts/gen, and the pages of ui/ built into
# internal/ui/dist, which the binary embeds. Both are committed; npm ci
# installs the versions pinned by each package-lock.json, so running this
# twice, or on another machine, changes nothing (CI checks it).
ui: tools
	cd clients/ts && npm ci --no-audit --no-fund
	rm -rf clients/ts/gen
	PATH="$(BIN):$$PATH" buf generate --template clients/ts/buf.gen.yaml --path proto/tenure/v1
	cd ui && npm ci --no-audit --no-fund && npm run build
