// Package handlers holds wowd's built-in handlers: http (the HTTP sink), log
// and discard. [Register] adds them to a registry; importing the package adds
// them to [handler.Default].
//
// # The HTTP sink
//
// The http handler POSTs each message's value, unchanged, to its URL with
// CloudEvents binary-mode headers (ce-specversion, ce-id, ce-source, ce-type,
// ce-subject = the aggregate ID, ce-time), the Kafka position (kafka-topic,
// kafka-partition, kafka-offset, kafka-key or kafka-key-base64), the record's
// headers as kafka-header-<name>, wowd-attempt (1 for the first attempt) and
// the configured headers. HTTP.md in this directory documents it for users.
//
// What follows a response, or the lack of one, is the response → action
// table: responseRules in http_action.go, which the sink decides by, the
// Wowd-Action response header ([ActionHeader]) first, then the status. `make
// docs` writes it into HTTP.md ("The response → action table"; see also
// [ResponseActions]), and a test fails when HTTP.md is stale.
//
// Retries are [handler.WithRetry]'s: a transient failure is retried after
// backoff-initial, doubling up to backoff-max, with jitter; a Retry-After
// response header (delta-seconds or an HTTP date, at most 5m) makes the wait
// at least that long (the longer of it and the backoff). After max-attempts
// attempts (0 retries forever) the last error is reported as transient with
// its attempt count: wowd parks the message's aggregate or dead-letters the
// message, as the dispatcher's on-failure says, unless most recent messages
// failed too, in which case the receiver backs off and retries it. When the message's context is canceled
// (revoke, shutdown), the call stops at once without a retry and the message
// is delivered again later.
package handlers
