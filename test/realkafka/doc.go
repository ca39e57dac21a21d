// Package realkafka proves wowd's delivery guarantees on a real Apache Kafka
// broker. Its tests build the wowd binary, run several instances of it as
// separate processes against the broker of internal/kafkatest, and record
// every request that reaches an HTTP sink served by the test: at-least-once
// across kill -9 and rolling restarts, parked aggregates across kill -9 and
// rolling restarts, bounded memory and window under a slow sink, backoff
// during a sink outage, poison records, records produced by kcat
// (librdkafka), and the KIP-848 consumer group protocol.
//
// The tests skip unless a broker can be had (see internal/kafkatest); with
// WOWD_REQUIRE_KAFKA=1 they fail instead. Run them with
//
//	go test -count=1 -v -timeout 30m ./test/realkafka/
//
// Environment:
//
//	WOWD_KAFKA_BROKERS          use this broker instead of starting one (internal/kafkatest)
//	WOWD_REQUIRE_KAFKA=1        fail instead of skipping without a broker, or without kcat
//	WOWD_REALKAFKA_LOGS=DIR     keep each test's wowd configurations and logs under DIR
//	WOWD_REALKAFKA_KNOWN_ISSUES=1  also run the tests of known, unfixed wowd issues
//	WOWD_SOAK=10m               how long TestSoak runs (default 1m; `make soak` sets SOAK, default 10m)
//
// The package holds no code but this comment: everything is in its tests.
package realkafka
