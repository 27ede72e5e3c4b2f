module github.com/tenurehq/tenure/sdk/outboxpgx

go 1.23.0

require (
	github.com/jackc/pgx/v5 v5.7.6
	github.com/tenurehq/tenure/sdk v0.0.0
)

require (
	connectrpc.com/connect v1.18.1 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	go.opentelemetry.io/otel v1.35.0 // indirect
	go.opentelemetry.io/otel/trace v1.35.0 // indirect
	golang.org/x/crypto v0.37.0 // indirect
	golang.org/x/text v0.24.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

// Built from the SDK of the same checkout; an application that requires a
// published version of this module gets the SDK version it names.
replace github.com/tenurehq/tenure/sdk => ../
