module github.com/tenurehq/tenure

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	connectrpc.com/grpchealth v1.5.0
	connectrpc.com/grpcreflect v1.3.0
	github.com/anishathalye/porcupine v1.3.1
	github.com/go-sql-driver/mysql v1.10.1
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.1.0
	google.golang.org/protobuf v1.36.12
)

require (
	filippo.io/edwards25519 v1.2.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
)
