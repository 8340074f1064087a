# fabro-go: run `make help` for the targets.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --warn-undefined-variables --no-builtin-rules

# Every Go module in the workspace (go.work), tested one by one with GOWORK=off
# so that a missing require cannot hide behind the workspace.
MODULES := gen gen/openapi/ogen gen/openapi/goswagger platform sdk services/vault services/llmgateway services/sandbox services/agent cmd/fabro examples/sandbox-plugin e2e
# Modules that hold Go code yet (go test fails on a module with no packages).
GO_MODULES = $(foreach m,$(MODULES),$(if $(shell find $(m) -name '*.go' -print -quit),$(m)))

# Pinned tool versions; `make tools` installs them into .tmp/bin through the module proxy.
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GRPC_GATEWAY_VERSION := v2.33.0
OAPI_CODEGEN_VERSION := v2.8.2
OGEN_VERSION := v1.25.0
SWAGGER_VERSION := v0.36.7
STATICCHECK_VERSION := v0.8.2
GOLANGCI_LINT_VERSION := v2.15.0
DEADCODE_VERSION := v0.52.0

TMP := $(CURDIR)/.tmp
BIN := $(TMP)/bin
BUF := $(BIN)/buf
export PATH := $(BIN):$(PATH)

# Where `make run` keeps its data (vault store, KEK, tokens, sessions): by
# default where every fabro command looks, $XDG_DATA_HOME/fabro or
# ~/.local/share/fabro, so `fabro secret set` and `fabro exec --server`
# find its admin token with nothing to export.
FABRO_DATA_DIR ?=

.PHONY: help
help: ## Describe the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# The directories `make run` lets sandboxes be rooted in, besides its
# managed workspaces: the repository's examples/, and your project when
# FABRO_WORKSPACE names it (make run FABRO_WORKSPACE=~/src/myproject).
FABRO_WORKSPACE ?=
comma := ,
space := $(subst ,, )
RUN_ROOTS = $(CURDIR)/examples$(if $(FABRO_WORKSPACE),$(comma)$(abspath $(FABRO_WORKSPACE)))
.PHONY: run
run: ## Run every service and the REST gateway in one process on embedded defaults (FABRO_WORKSPACE=DIR: sandboxes may use DIR)
	@scripts/build $(BIN)/fabro ./cmd/fabro -ldflags '$(FABRO_LDFLAGS)'
	@$(if $(FABRO_WORKSPACE),,echo "make run: sandboxes may be rooted in $(CURDIR)/examples; for your own project: make run FABRO_WORKSPACE=~/src/myproject")
	@# exec: Ctrl-C reaches fabro, which drains and exits 0, and so does make.
	@exec $(BIN)/fabro serve $(if $(FABRO_DATA_DIR),--data-dir "$(FABRO_DATA_DIR)") --sandbox-allowed-roots "$(RUN_ROOTS)"

.PHONY: demo
demo: ## Run an agent offline: fabro exec against the fake provider on a scratch project
	@rm -rf $(TMP)/demo && mkdir -p $(TMP)/demo/ws && printf 'hello\n' > $(TMP)/demo/ws/hello.txt
	@scripts/build $(BIN)/fakeprovider ./services/llmgateway/cmd/fakeprovider
	@scripts/build $(BIN)/fabro ./cmd/fabro -ldflags '$(FABRO_LDFLAGS)'
	@$(BIN)/fakeprovider -addr 127.0.0.1:7790 -script deploy/demo-script.json -print-overlay > $(TMP)/demo/overlay.json & \
	  pid=$$!; trap "kill $$pid" EXIT; \
	  for i in $$(seq 50); do [ -s $(TMP)/demo/overlay.json ] && break; sleep 0.1; done; \
	  cd $(TMP)/demo/ws && ANTHROPIC_API_KEY=offline-demo $(BIN)/fabro exec -data-dir $(TMP)/demo/data \
	    -llm-catalog-overlay $(TMP)/demo/overlay.json --model anthropic/claude-sonnet-4.5 --permissions full \
	    "Make the greeting in hello.txt friendlier."; \
	  echo "--- hello.txt is now:"; cat hello.txt

# make test runs these one after another, saying what it does and for how
# long.
TEST_PHASES := tools lint checkgenerate breaking test-go test-cluster test-tooling
.PHONY: test
test: ## Run every check and every test (what CI runs)
	@start=$$SECONDS; n=0; for p in $(TEST_PHASES); do n=$$((n+1)); s=$$SECONDS; \
	  echo "==> make test: phase $$n of $(words $(TEST_PHASES)), $$p"; \
	  $(MAKE) --no-print-directory $$p || { echo "<== make test: $$p failed after $$((SECONDS-s)) s (total $$((SECONDS-start)) s)"; exit 1; }; \
	  echo "<== make test: $$p done in $$((SECONDS-s)) s (total $$((SECONDS-start)) s)"; done

.PHONY: test-tooling
test-tooling: ## Checks of the project's own tooling: waiting for a dpkg lock another apt holds
	@scripts/test-apt-lock

.PHONY: test-go
# Two modules at a time: most of a module's run waits on processes, Docker
# and NATS rather than on the CPU. TEST_JOBS=1 runs them one by one.
TEST_JOBS ?= 2
# The longest modules first, so the short ones fill the other slot.
TEST_ORDER := e2e services/agent cmd/fabro services/sandbox
test-go: sandbox-image ## go test -race in every module, each with GOWORK=off
	@JOBS=$(TEST_JOBS) scripts/test-modules $(filter $(GO_MODULES),$(TEST_ORDER)) $(filter-out $(TEST_ORDER),$(GO_MODULES))

.PHONY: test-short
test-short: ## The inner loop: every module's tests that need no container (go test -short, no -race)
	@SHORT=1 JOBS=$(TEST_JOBS) scripts/test-modules $(filter $(GO_MODULES),$(TEST_ORDER)) $(filter-out $(TEST_ORDER),$(GO_MODULES))

# What deadcode may report: functions no program or test of the workspace
# reaches yet that stay on purpose, each with its reason. Anything else
# it reports fails make lint.
DEADCODE_ALLOW := \
  _test.go:.*unreachable.func:.Example \
  sdk/sandbox/plugin/plugin.go:.*WithLogger \
  services/agent/natstest/natstest.go:.*Cluster.Node \
  services/agent/natstest/natstest.go:.*Cluster.NodeURL
# Example functions without an Output comment: compiled, never run (a
# plugin's Serve exits). WithLogger: the plugin SDK's public API, for
# plugins outside this repository (its Example uses it). Cluster.Node,
# NodeURL: natstest's helpers for tests of a single node of a cluster.

.PHONY: lint
lint: tools ## gofmt, go vet, staticcheck and golangci-lint in every module, deadcode over the workspace, buf lint and buf format
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@for m in $(GO_MODULES); do (cd $$m && GOWORK=off go mod tidy -diff >/dev/null || { echo "$$m: go.mod is not tidy: run 'make tidy'"; exit 1; }; GOWORK=off go vet ./...); done
	@# staticcheck's default checks (its binary, pinned); golangci-lint's
	@# others (.golangci.yml says which and why). Both exit non-zero on a finding.
	@rc=0; for m in $(GO_MODULES); do \
	  (cd $$m && GOWORK=off $(BIN)/staticcheck ./... | sed "s|^|$$m/|") || rc=1; \
	  (cd $$m && GOWORK=off $(BIN)/golangci-lint run --config $(CURDIR)/.golangci.yml ./...) || rc=1; \
	  done; exit $$rc
	@# Whole-program over the workspace (a library's function may be used
	@# by another module only), tests included.
	@out=$$($(BIN)/deadcode -test $(addsuffix /...,$(addprefix ./,$(GO_MODULES))) | grep -vE '$(subst $(space),|,$(strip $(DEADCODE_ALLOW)))' || true); \
	  if [ -n "$$out" ]; then echo "deadcode: unreachable functions (remove them, or name one in DEADCODE_ALLOW with a reason):"; echo "$$out"; exit 1; fi
	$(BUF) lint
	$(BUF) format --diff --exit-code

.PHONY: generate
generate: tools ## Regenerate gen/ from proto/
	find gen -type f \( -name '*.pb.go' -o -name '*.pb.gw.go' \) -delete
	rm -f gen/openapi/fabro.swagger.json gen/openapi/fabro.openapi.json gen/openapi/client/client.gen.go
	$(BUF) generate
	@# The contracts with their comments, for server reflection (grpcurl describe, buf curl).
	$(BUF) build -o gen/descriptor/fabro.binpb
	@# OpenAPI 3 (merged and per service) from the v2 document, then the Go REST client from it.
	cd gen && GOWORK=off go run ./openapi/internal/openapigen -dir openapi
	$(BIN)/oapi-codegen -config gen/openapi/client/oapi-codegen.yaml gen/openapi/fabro.openapi.json
	@# A second strict generator's client (a module of its own: gen/openapi/ogen).
	$(BIN)/ogen --target gen/openapi/ogen --package ogenclient --clean --config gen/openapi/ogen/ogen.yml gen/openapi/fabro.openapi.json 2>$(TMP)/ogen.log || { cat $(TMP)/ogen.log; exit 1; }
	@# A third, go-swagger, strict on the OpenAPI v2 document (a module of its own: gen/openapi/goswagger).
	rm -rf gen/openapi/goswagger/client gen/openapi/goswagger/models
	$(BIN)/swagger generate client -q -f gen/openapi/fabro.swagger.json -t gen/openapi/goswagger -A fabro
	@# The Python stubs of sdk/python, with Debian's protoc and grpc_python_plugin.
	find sdk/python/fabro sdk/python/google -name '*_pb2*.py' -delete 2>/dev/null || true
	$(BUF) generate --template sdk/python/buf.gen.yaml

.PHONY: checkgenerate
checkgenerate: generate ## Fail when gen/ or sdk/python's stubs differ from what proto/ generates
	@git add --intent-to-add gen sdk/python
	@if ! git diff --quiet -- gen sdk/python; then \
	  echo "gen/ or sdk/python is stale: run 'make generate' and commit the result"; git diff --stat -- gen sdk/python; exit 1; fi

# The contracts of the last release, as a buf image committed in the tree
# (CI's fresh clone has no tags to compare with). `make release-contracts`
# cuts it at a release; `make breaking` (in `make test`) compares proto/
# with it under buf.yaml's breaking rules (WIRE_JSON).
RELEASED_CONTRACTS := proto/released/v1.binpb
# The v1 packages the self-check removes a field from (every one is checked:
# none is an unstable package, which buf.yaml's ignore_unstable_packages skips).
BREAKING_SELFCHECK := fabro/agent/v1 fabro/llm/v1 fabro/sandbox/v1 fabro/sandbox/plugin/v1 fabro/vault/v1 fabro/auth/v1
# A top-level message's field: "  [repeated ]type name = N;" (not an enum value).
FIELD_LINE := '^  (repeated |optional )?(map<[^>]*>|[A-Za-z][A-Za-z0-9_.]*) [a-z][a-z0-9_]* = [0-9]+( \[|;)'

.PHONY: breaking
breaking: tools ## buf breaking: proto/ against the released contracts (proto/released/v1.binpb)
	$(BUF) breaking --against $(RELEASED_CONTRACTS)
	@# The check must be able to fail: proto/ with one field of a v1 package
	@# removed is breaking against proto/ as it is, in every package.
	@d=$(TMP)/breaking-selfcheck; rm -rf $$d && mkdir -p $$d && \
	  $(BUF) build --exclude-source-info -o $$d/now.binpb && \
	  for pkg in $(BREAKING_SELFCHECK); do \
	    rm -rf $$d/tree && mkdir -p $$d/tree && cp -r buf.yaml proto $$d/tree/ && rm -rf $$d/tree/proto/released; \
	    f=$$(grep -lE $(FIELD_LINE) $$d/tree/proto/$$pkg/*.proto | sed -n 1p); \
	    [ -n "$$f" ] || { echo "breaking self-check: no field in $$pkg"; exit 1; }; \
	    line=$$(grep -n -m1 -E $(FIELD_LINE) $$f | cut -d: -f1); \
	    sed -i "$${line}d" $$f; \
	    if (cd $$d/tree && $(BUF) breaking --error-format json --against $$d/now.binpb >$$d/out 2>&1); then \
	      echo "breaking self-check: removing line $$line of $${f#$$d/tree/} is not reported by buf breaking"; exit 1; fi; \
	    grep -q "\"type\":\"FIELD_NO_DELETE" $$d/out || { echo "breaking self-check: unexpected output for $$pkg:"; cat $$d/out; exit 1; }; \
	  done; echo "breaking self-check: a field removed from any of $(words $(BREAKING_SELFCHECK)) v1 packages fails buf breaking"

.PHONY: openapi-names
openapi-names: ## Accept the OpenAPI type names as generated now (after a deliberate change; review the golden's diff)
	cd gen && GOWORK=off go test -count=1 ./openapi -run TestTypeNames -update

.PHONY: release-contracts
release-contracts: tools ## Cut the released contracts (proto/released/v1.binpb) from proto/ at a release; commit it
	$(BUF) lint
	@mkdir -p $(dir $(RELEASED_CONTRACTS))
	$(BUF) build --exclude-source-info -o $(RELEASED_CONTRACTS).tmp#format=binpb
	@# The new image must be readable and proto/ compatible with it, before it replaces the old one.
	$(BUF) breaking --against $(RELEASED_CONTRACTS).tmp#format=binpb
	mv -f $(RELEASED_CONTRACTS).tmp $(RELEASED_CONTRACTS)
	@echo "released contracts cut: commit $(RELEASED_CONTRACTS)"

.PHONY: tidy
tidy: ## go mod tidy in every module, then go work sync
	@for m in $(GO_MODULES); do (cd $$m && GOWORK=off go mod tidy); done
	go work sync

.PHONY: build
# fabro --version: stamped here, since builds in a worktree or with
# -buildvcs=false carry no VCS information of their own.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
FABRO_LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILD_DATE)
build: ## Build every binary into bin/
	@mkdir -p bin
	go build -ldflags '$(FABRO_LDFLAGS)' -o bin/fabro ./cmd/fabro
	@for d in services/*/cmd/*/; do go build -o bin/$$(basename $$d) ./$$d; done

.PHONY: plugins
plugins: ## Build the sandbox plugins into bin/plugins with their SHA256SUMS (-sandbox-plugin-dir bin/plugins)
	@mkdir -p bin/plugins
	go build -o bin/plugins/fabro-sandbox-bwrap ./services/sandbox/cmd/fabro-sandbox-bwrap
	CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o bin/plugins/fabro-bwrap-init ./services/sandbox/cmd/fabro-bwrap-init
	cd bin/plugins && sha256sum fabro-sandbox-* > SHA256SUMS

# Static binaries, one build context each, for deploy/Dockerfile.
COMPOSE_SERVICES := vault llmgateway sandbox agent
# The compose project: override it (and FABRO_GRPC_PORT, FABRO_HTTP_PORT) to
# run a second stack beside the first.
COMPOSE_PROJECT_NAME ?= fabro
# The images' tag (fabro/<service>:$(FABRO_IMAGE_TAG)); the compose test builds its own.
FABRO_IMAGE_TAG ?= dev
# The project the sandbox container mounts at the same path: the directory
# `make` was started from (`cd ~/src/app && make -C ~/fabro-go up`).
FABRO_PROJECT_DIR ?= $(or $(PWD),$(CURDIR))
# OFFLINE=1: run the fake provider (profile offline) and point the catalog at it.
OFFLINE ?=
COMPOSE_ENV = PWD=$(FABRO_PROJECT_DIR) FABRO_IMAGE_TAG=$(FABRO_IMAGE_TAG) $(if $(OFFLINE),COMPOSE_PROFILES=offline FABRO_LLM_CATALOG_OVERLAY=/etc/fabro/offline-overlay.json)
COMPOSE := $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose) -p $(COMPOSE_PROJECT_NAME)
.PHONY: images
images: ## Build the service images offline (FROM scratch) for compose.yaml
	@for s in $(COMPOSE_SERVICES); do \
	  mkdir -p $(addprefix .tmp/images/$$s/rootfs/,data auth run/fabro issue/admin issue/llmgateway issue/agent issue/sandbox) && \
	  cp /etc/ssl/certs/ca-certificates.crt .tmp/images/$$s/ && \
	  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .tmp/images/$$s/app ./services/$$s/cmd/$$s; done
	@for b in otlpsink:platform/cmd/otlpsink router:platform/cmd/router fakeprovider:services/llmgateway/cmd/fakeprovider; do \
	  n=$${b%%:*}; mkdir -p .tmp/images/$$n/rootfs && cp /etc/ssl/certs/ca-certificates.crt .tmp/images/$$n/ && \
	  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .tmp/images/$$n/app ./$${b#*:}; done
	@$(MAKE) docker-daemon
	@docker image inspect fabro/sandbox-base:dev >/dev/null 2>&1 || $(MAKE) sandbox-base
	FABRO_IMAGE_TAG=$(FABRO_IMAGE_TAG) COMPOSE_PROFILES=offline $(COMPOSE) build

# The sandbox image's base: a minimal Debian root filesystem with bash,
# ripgrep and git (the agent's workspace checkpoints), made with debootstrap from Debian's mirror and imported, since no
# image registry is reachable.
DEBIAN_MIRROR ?= http://deb.debian.org/debian
.PHONY: sandbox-base
sandbox-base: ## Build fabro/sandbox-base:dev with debootstrap (needs root)
	@command -v debootstrap >/dev/null || scripts/apt-install debootstrap
	rm -rf $(TMP)/rootfs && debootstrap --variant=minbase --include=ripgrep,git bookworm $(TMP)/rootfs $(DEBIAN_MIRROR)
	tar -C $(TMP)/rootfs -c . | docker import - fabro/sandbox-base:dev
	rm -rf $(TMP)/rootfs

# The docker sandbox driver's tests run on the real engine with its default
# image: built offline once, then only checked for.
.PHONY: sandbox-image
sandbox-image: docker-daemon ## Build fabro/sandbox-base:dev when the Docker engine lacks it
	@docker image inspect fabro/sandbox-base:dev >/dev/null 2>&1 || $(MAKE) sandbox-base

# A fresh machine (CI among them) may have the engine installed but not
# running: start it, through its init script when there is one, and wait for
# its socket.
.PHONY: docker-daemon
docker-daemon: ## Start the Docker engine when it is installed but not running
	@docker info >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  echo "starting the Docker engine"; \
	  { [ -x /etc/init.d/docker ] && $$SUDO /etc/init.d/docker start; } || \
	    { mkdir -p $(TMP) && $$SUDO setsid -f dockerd >$(TMP)/dockerd.log 2>&1 < /dev/null; }; \
	  for i in $$(seq 120); do docker info >/dev/null 2>&1 && exit 0; sleep 0.5; done; \
	  echo "the Docker engine did not start; see /var/log/docker.log or $(TMP)/dockerd.log"; \
	  tail -20 /var/log/docker.log $(TMP)/dockerd.log 2>/dev/null; exit 1; }

.PHONY: up
up: images ## Run the services as containers (compose.yaml) behind one front door, 127.0.0.1:7700 / :7780
	$(COMPOSE_ENV) $(COMPOSE) up -d
	@echo "the stack's front door: -server 127.0.0.1:$${FABRO_GRPC_PORT:-7700}; admin token: make admin-token"

.PHONY: admin-token
admin-token: ## Copy the compose stack's admin token to ./admin.token (0600)
	@id=$$($(COMPOSE_ENV) $(COMPOSE) ps -q vault); [ -n "$$id" ] || { echo "the vault container is not running: make up"; exit 1; }; \
	  for i in $$(seq 30); do docker cp $$id:/issue/admin/token admin.token 2>/dev/null && chmod 600 admin.token && echo "admin.token" && exit 0; sleep 1; done; \
	  echo "the vault has not issued the admin token yet: see $(COMPOSE) logs vault"; exit 1

.PHONY: down
# VOLUMES=1 removes the volumes too (the vault's store, the tokens, the
# workspaces): what `make up` made, all of it.
VOLUMES ?=
down: ## Stop and remove the containers and networks of `make up` (VOLUMES=1: its volumes too)
	$(COMPOSE_ENV) COMPOSE_PROFILES=offline $(COMPOSE) down --remove-orphans $(if $(VOLUMES),-v)

# The cluster deployment (compose.cluster.yaml): the service images of
# `make images`, plus nats-server built from the Go module cache and the
# fake provider, static and FROM scratch like the others. CLUSTER_PROJECT
# names the compose project (its containers, networks and volumes) and the
# images' tag; `make test-cluster` picks one of its own per run.
CLUSTER_PROJECT ?= cluster
COMPOSE_CLUSTER = FABRO_CLUSTER_TAG=$(CLUSTER_PROJECT) $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose) -p $(CLUSTER_PROJECT) -f compose.cluster.yaml
.PHONY: images-cluster
images-cluster: docker-daemon ## Build the images of compose.cluster.yaml (three NATS nodes, two agent replicas) offline, tagged :CLUSTER_PROJECT
	@for s in $(COMPOSE_SERVICES) fakeprovider nats; do \
	  mkdir -p $(addprefix .tmp/images-cluster/$$s/rootfs/,data auth run/fabro issue/admin issue/llmgateway issue/agent issue/sandbox) && \
	  cp /etc/ssl/certs/ca-certificates.crt .tmp/images-cluster/$$s/ || exit 1; done
	@for s in $(COMPOSE_SERVICES); do \
	  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .tmp/images-cluster/$$s/app ./services/$$s/cmd/$$s || exit 1; done
	@CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o .tmp/images-cluster/fakeprovider/app ./services/llmgateway/cmd/fakeprovider
	@cd services/agent && CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags='-s -w' -o ../../.tmp/images-cluster/nats/app github.com/nats-io/nats-server/v2
	@docker image inspect fabro/sandbox-base:dev >/dev/null 2>&1 || $(MAKE) sandbox-base
	$(COMPOSE_CLUSTER) build

.PHONY: up-cluster
up-cluster: images-cluster ## Run compose.cluster.yaml: three NATS nodes, two agent replicas, the fake provider
	$(COMPOSE_CLUSTER) up -d

.PHONY: down-cluster
down-cluster: ## Stop compose.cluster.yaml and remove its volumes
	$(COMPOSE_CLUSTER) down -v --remove-orphans

# The cluster container test: kills the owning agent replica, a NATS node,
# and cuts one off the network, each mid-prompt (e2e/cluster). Its compose
# project and image tag are this run's own (cluster-<random>), so two runs
# on one engine do not meet; its images are removed when it ends.
.PHONY: test-cluster
test-cluster: docker-daemon ## Run the cluster container test against compose.cluster.yaml, under a project of its own
	@run=cluster-$$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n'); echo "test-cluster: compose project and image tag $$run"; \
	  rc=0; $(MAKE) --no-print-directory images-cluster CLUSTER_PROJECT=$$run && \
	  (cd e2e && FABRO_CLUSTER_COMPOSE=$(CURDIR)/compose.cluster.yaml FABRO_CLUSTER_PROJECT=$$run FABRO_CLUSTER_TAG=$$run \
	    GOWORK=off go test -count=1 -v -run TestComposeCluster ./cluster/) || rc=$$?; \
	  docker image ls -q --filter "reference=fabro/*:$$run" | xargs -r docker image rm -f >/dev/null 2>&1 || true; \
	  exit $$rc

.PHONY: bench
bench: ## Run the benchmarks of every module
	@for m in $(GO_MODULES); do (cd $$m && GOWORK=off go test -run '^$$' -bench . -benchmem ./...); done

.PHONY: tools
tools: deps $(BUF) $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv2 $(BIN)/oapi-codegen $(BIN)/ogen $(BIN)/swagger $(BIN)/staticcheck $(BIN)/golangci-lint $(BIN)/deadcode ## Install pinned tools into .tmp/bin

# Each tool is rebuilt when its pinned version changes: the stamp file names the version.
$(BUF): $(TMP)/stamps/buf-$(BUF_VERSION)
$(TMP)/stamps/buf-$(BUF_VERSION):
	GOBIN=$(BIN) go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@mkdir -p $(@D) && touch $@
$(BIN)/protoc-gen-go: $(TMP)/stamps/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)
$(TMP)/stamps/protoc-gen-go-$(PROTOC_GEN_GO_VERSION):
	GOBIN=$(BIN) go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	@mkdir -p $(@D) && touch $@
$(BIN)/protoc-gen-go-grpc: $(TMP)/stamps/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
$(TMP)/stamps/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION):
	GOBIN=$(BIN) go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	@mkdir -p $(@D) && touch $@
$(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv2: $(TMP)/stamps/grpc-gateway-$(GRPC_GATEWAY_VERSION)
$(TMP)/stamps/grpc-gateway-$(GRPC_GATEWAY_VERSION):
	GOBIN=$(BIN) go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY_VERSION) github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY_VERSION)
	@mkdir -p $(@D) && touch $@

$(BIN)/swagger: $(TMP)/stamps/swagger-$(SWAGGER_VERSION)
$(TMP)/stamps/swagger-$(SWAGGER_VERSION):
	GOBIN=$(BIN) go install github.com/go-swagger/go-swagger/cmd/swagger@$(SWAGGER_VERSION)
	@mkdir -p $(@D) && touch $@

$(BIN)/ogen: $(TMP)/stamps/ogen-$(OGEN_VERSION)
$(TMP)/stamps/ogen-$(OGEN_VERSION):
	GOBIN=$(BIN) go install github.com/ogen-go/ogen/cmd/ogen@$(OGEN_VERSION)
$(BIN)/staticcheck: $(TMP)/stamps/staticcheck-$(STATICCHECK_VERSION)
$(TMP)/stamps/staticcheck-$(STATICCHECK_VERSION):
	GOBIN=$(BIN) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	@mkdir -p $(@D) && touch $@
$(BIN)/golangci-lint: $(TMP)/stamps/golangci-lint-$(GOLANGCI_LINT_VERSION)
$(TMP)/stamps/golangci-lint-$(GOLANGCI_LINT_VERSION):
	GOBIN=$(BIN) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	@mkdir -p $(@D) && touch $@
$(BIN)/deadcode: $(TMP)/stamps/deadcode-$(DEADCODE_VERSION)
$(TMP)/stamps/deadcode-$(DEADCODE_VERSION):
	GOBIN=$(BIN) go install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)
	@mkdir -p $(@D) && touch $@

$(BIN)/oapi-codegen: $(TMP)/stamps/oapi-codegen-$(OAPI_CODEGEN_VERSION)
$(TMP)/stamps/oapi-codegen-$(OAPI_CODEGEN_VERSION):
	GOBIN=$(BIN) go install github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen@$(OAPI_CODEGEN_VERSION)
	@mkdir -p $(@D) && touch $@

# Debian packages the tests need: ripgrep for the sandbox's grep back end,
# bubblewrap for the bwrap sandbox plugin and slirp4netns for its network
# (a namespace of its own, no host loopback), python3-grpcio and
# python3-protobuf (for Debian's /usr/bin/python3: the agent's client-tool
# test and sdk/python's tests drive them), protobuf-compiler and
# protobuf-compiler-grpc (protoc and grpc_python_plugin: make generate
# writes sdk/python's stubs with them). scripts/apt-install waits for a dpkg lock
# another apt holds (a fresh VM's unattended upgrades), saying so.
.PHONY: deps
deps: ## Install the Debian packages the tests need (apt-get, when missing)
	@missing=; \
	  command -v rg >/dev/null || missing="$$missing ripgrep"; \
	  command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	  command -v slirp4netns >/dev/null || missing="$$missing slirp4netns"; \
	  [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || missing="$$missing iproute2"; \
	  /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null || missing="$$missing python3-grpcio python3-protobuf"; \
	  [ -x /usr/bin/protoc ] || missing="$$missing protobuf-compiler"; \
	  [ -x /usr/bin/grpc_python_plugin ] || missing="$$missing protobuf-compiler-grpc"; \
	  command -v tmux >/dev/null || missing="$$missing tmux"; \
	  command -v mkfs.ext4 >/dev/null || [ -x /sbin/mkfs.ext4 ] || missing="$$missing e2fsprogs"; \
	  command -v git >/dev/null || missing="$$missing git"; \
	  command -v zsh >/dev/null || missing="$$missing zsh"; \
	  command -v fish >/dev/null || missing="$$missing fish"; \
	  [ -z "$$missing" ] || scripts/apt-install $$missing

.PHONY: clean
clean: ## Remove build output and installed tools
	rm -rf bin .tmp
