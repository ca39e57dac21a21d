// Package wow knows what services built on the Wow framework (Ahoo-Wang/Wow)
// put on Kafka and where: the bounded-context metadata that names the topics,
// and the JSON messages on them. It knows nothing of Kafka clients or config
// files. Of the handler SDK it uses only the message kinds (handler.Kind,
// as [Kind]), so that a kind means the same in both and never needs a
// conversion; it calls no handler.
//
// # Metadata
//
// [ParseMetadata] and [LoadMetadata] read Wow's wow-metadata.json, from a
// file or from a running service's GET /wow/metadata. A context's alias
// defaults to its name, as in Wow, and aliases must be unique.
// [Metadata.Contexts] gives the contexts that own aggregates as
// [Context] values (alias and sorted aggregate names); the configuration's
// contexts are the same type.
// [Metadata.Agrees] checks inline contexts against the metadata and reports
// every difference in a [*MismatchError]. [Topic] computes a topic name;
// [SnakeName] derives a command or event name from its class name.
//
// # Messages
//
// A record's value is a command, a domain event stream or a state event,
// depending on the topic it came from: the caller passes the [Kind] (the
// topic suffix). [Message.Decode] reads the fields that routing and
// handlers need (ids, names, versions, createTime, the header and the event
// names of a stream) with a small scanner over the bytes. It validates the
// whole value as JSON but never decodes the bodies or the state: they are
// skipped, so a large state costs a scan, not a tree of Go values.
//
// Decoding a message allocates once in the steady state: the decoded
// strings are copied into one buffer of their own (a string with escapes
// costs one more allocation; Wow's Jackson escapes only quotes, backslashes
// and control characters). So a Message never keeps the record's bytes, or
// the fetch buffer they live in, alive, and the value may be reused after
// Decode returns. Decode reuses the Message's Header and Events slices: do
// not reuse a Message while anything still reads the previous one.
//
// The decoder accepts exactly what encoding/json accepts as JSON (including
// its nesting limit of 10000 and its handling of invalid UTF-8 and lone
// surrogates, which become U+FFFD), and a key written twice means its last
// value, as in encoding/json and Jackson. Where Wow's own reader (Jackson
// JsonNode accessors such as asText and asLong) would coerce a value of the
// wrong type, Decode reports an error instead; Wow never writes such values.
// What each kind requires:
//
//   - every kind: id, contextName, aggregateName and aggregateId are strings,
//     and aggregateId is not empty;
//   - commands: name is a string;
//   - event streams and state events: body is an array of objects, each with
//     a string name.
//
// The other fields read (tenantId, requestId, commandId, version,
// aggregateVersion, createTime, header) may be absent or null. Strings must
// be strings, header values must be strings, and numbers must be integers
// in the int64 range (written in any JSON form: 3, 3.0 and 3e0 are all 3).
// Errors are [*DecodeError]s; none panics, whatever the input.
//
// [Message.Check] repeats Wow's receive-side checks: the record key is the
// aggregate id and the message belongs to the topic's aggregate.
package wow
