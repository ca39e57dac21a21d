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
// What follows a response, or the lack of one (the first matching row
// decides):
//
//	response                                     outcome
//	-------------------------------------------  ---------------------------------------------------
//	Wowd-Action: done         (any status)       done: the message is handled
//	Wowd-Action: retry        (any status)       transient: retried, honouring Retry-After
//	Wowd-Action: dead-letter  (any status)       permanent: to the dead-letter topic, no retry
//	Wowd-Action: skip         (any status)       skip: acknowledged without handling, no retry
//	Wowd-Action: other value                     ignored (debug log): the rows below decide
//	2xx                                          done
//	307, 308 to the same scheme and host         followed (up to 10 hops); the final response decides
//	other 3xx                                    permanent: not followed
//	408, 429                                     transient
//	other 4xx                                    permanent
//	5xx                                          transient
//	timeout, connection or TLS error, no answer  transient
//
// The Wowd-Action header ([ActionHeader]) is matched case-insensitively. A
// transient failure is retried after backoff-initial, doubling up to
// backoff-max, with jitter; a Retry-After response header (delta-seconds
// or an HTTP date, at most 5m) sets the wait instead. After max-attempts
// attempts (0 retries forever) the last error is reported as transient with
// its attempt count: wowd dead-letters the message, unless most recent
// messages failed too, in which case the receiver backs off and retries it.
// When the message's context is canceled (revoke, shutdown), the call stops
// at once without a retry and the message is delivered again later.
package handlers
