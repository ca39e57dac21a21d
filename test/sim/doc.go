// Package sim is a seeded simulation of wowd's delivery path under
// adversarial faults. Each run drives the real receiver, executor and
// handler layers against franz-go's fake broker (kfake) inside a
// testing/synctest bubble with kfake's in-memory network, so the clock is
// fake: a minute of simulated traffic, rebalances and faults takes about a
// second.
//
// One seed drives a run: the group protocol (in a quarter of the seeds
// the consumer protocol, KIP-848, with the broker's session and heartbeat
// set like the classic members'), the topic's shape, the traffic, what the handler
// does with each try of each message (synchronous or asynchronous
// acknowledgement, a second acknowledgement, the Ack of an earlier message,
// transient and permanent errors, Skip, a panic, a try that hangs past its
// deadline, one that waits for its cancellation), the group churn (members
// joining, stopping with a random deadline, crashing, cut off the network
// long enough to lose their session, and, in a third of the classic-protocol
// seeds, cut off just as they rejoin the group, for 6.5-9.5 s: see below)
// and the broker faults (failed commits,
// in runs with stalls coordinators that answer no commit for up to 15 s,
// so that the commit, and the member's heartbeats and leave behind it,
// wait);
// refused dead-letter writes (a third of them refused as too large, so
// that the receiver writes them again as stubs without their values; and
// now and then a failed message's dead letter refused for good, so that
// its receiver gives up on it),
// spells of 1-8 s in which the brokers answer no dead-letter, parked or
// state write (in a third of the seeds, drawn apart, with the members'
// producer buffer at 1 to 3 records, so that those writes find it full,
// kgo.ErrMaxBuffered, and are written again after a backoff: the poll
// loop and the workers never wait for room),
// fetch errors, coordinators and leaders moving), in half of the seeds
// parking (on-failure park) with an operator asking for redrives, skips
// and discards of parked aggregates and for parks by hand of any
// aggregate at random, and redriving every one left once the faults stop;
// in a third of those max-parked is 2 to 5, so that failed messages wait
// for room with fetching paused, and the operator redrives while the
// partitions catch up too; parked-topic writes refused as too large
// (retried, holding their partitions), spells in which the
// group's describes fail (a member's parking lease is extended only by a
// describe that lists it, so its parking writes wait), and late state writes
// of a partition's earlier ownership (a parked aggregate's head moved past
// its messages, as a member that lost the partition could still deliver),
// the local-first ingest (ingest_test.go): each member runs the real
// ingest endpoint (internal/ingest) over its receiver, with a producer
// client of its own, and callers post bursts of messages to it, each
// aggregate's one after another through one member at a time (passed to a
// member started after its last one ended, so that the start barrier is
// what keeps their order), over keys of their own and, in two thirds of
// the seeds, keys that also get records produced straight to the topic
// before and between their sidecars; a share of the publishes fail for
// good (the ingest answers 502 after NotPublished), 1% panic on the way
// (the caller's connection ends; the receivers must still hear that
// nothing was published) and some produce
// requests fail and are retried, and in a third of the seeds a memory budget (wow.memory.limit at its
// least) shared by the members, with values padded so that their receivers
// hold fetched records and give them back when it is short. In a third of
// the seeds, drawn apart from those, the members' handler is the real HTTP
// sink (internal/handlers), posting over the in-memory network to a server
// in the bubble that makes the same choices per request (sink_test.go): one
// message per request or batched, HTTP/1.1 or h2c, with or without a
// max-concurrency below the window, and in half of them a rate-limit of
// 30 to 80 requests a second with a burst of 1 to 4; in all of them the
// operator reloads the sinks' rate-limit now and then, to none, to 1-3 a
// second or to 30-80, and back to the seed's own at the calm
// (ratereload_test.go). In a quarter of the
// seeds, drawn apart again, the members' route is a blocking one (a
// handler.Blocker's), whose calls run on the executor's blocking pool of
// three goroutines and each block for 2 ms (blocking_test.go); in half of
// those without the HTTP sink the handler is wrapped in handler.WithRetry
// (three attempts, 10 to 40 ms apart), whose attempts after a backoff wait
// for the pool again (-blockingretry runs every seed so). In a third
// of the seeds, drawn apart once more, every record is a Wow event stream
// (aggregate key, version seq+1, as the ingest's messages are) and the
// members' receivers decode them and check their versions, parking an
// aggregate at a gap where the run parks (version_test.go; -versioncheck
// runs every seed so). In a third of the seeds, drawn apart yet again,
// the producer also writes poison records, up to two a batch at positions
// drawn from the seed (poison_test.go; -poison runs every seed so): records
// without a key in every mode and, in the version-check mode, values that
// do not decode and event streams of another aggregate than their key or
// of another aggregate type than their topic's, kept out of the
// aggregates' records and sequence numbers. The handler's choices depend only on the seed and the message's
// position and attempt (at the sink, the request's number), not on the
// order in which goroutines run.
//
// The cut as a member rejoins (wire_test.go) is armed for a member now and
// then, with a member started beside it where the group has room (its join
// begins a rebalance); it falls when the member's client writes its
// JoinGroup under its member ID, after the revoke that ended its session.
// The coordinator drops the member before that JoinGroup arrives, the other
// members take its partitions, and the client, answered UNKNOWN_MEMBER_ID,
// joins again under a new member ID still holding what it owned: the new
// session revokes the partitions that went to others, which the receiver
// lets go as lost instead of draining and committing them, and takes again
// those it gets back (Receiver.retake). Only there: a member cut off while
// its session runs hears of the drop from its heartbeat first, and its
// client lets everything go as lost. The run's summary counts the cuts and
// how often the receivers took that path.
//
// After each run the invariants are checked; see check in sim_test.go:
//
//   - every produced record was handled (or skipped by the handler) or
//     dead-lettered, at least once: a parked one only counts once it was
//     redriven, skipped or discarded; one whose dead-letter write was
//     refused until the receiver gave up on it counts as done (the
//     receiver's documented loss: it logs the record's position), and only
//     once the members' clients reported as many refusals of its
//     dead-letter writes as the receiver makes attempts (8), with the
//     errors the brokers answered (promises_test.go);
//   - every dead letter has a cause the simulation saw: the receiver's
//     (wowd-dlq-* headers) follows a try of its record that failed (a
//     failure the handler chose, or a try that may have outlived its
//     deadline); one from a parking (wowd-parked-* headers) follows a
//     parked copy of the record in that parking and an operator's discard
//     of its aggregate asked on that parking, or a skip asked there with
//     the record at the head, that had failed (a redrive dead-letters
//     nothing); the receiver's of a poison record carries its own class
//     (unroutable, undecodable, mismatch), never a handler failure's;
//   - a poison record is never handed to the handler (nor reaches the
//     sink's server), never heads a parking (it may only be parked behind
//     its key's parked aggregate), and is dead-lettered with its class, or
//     given up as above, or dead-lettered from its key's parking by a
//     discard; each member's wowd_messages_total{outcome="unroutable"}
//     equals the dead letters of poison records acknowledged to its
//     receiver;
//   - a member that logs a revoke committed what its tries finished in its
//     ownership of the partition (from its assignment) from its last commit
//     there on (up to its revoke drain's deadline), unless its last commit
//     request was refused or not answered, or the member was cut off since
//     it was written (a commit tried while cut off is never written), or
//     it was stopping or crashed;
//   - a try hands over the record produced at its position; and within
//     one member's ownership of a partition (assignment to revoke or loss;
//     a rewind ends the judgement), an aggregate's deliveries never go back
//     in its sequence (seeds 3, 7, 20 and 4676 caught a member that
//     redrove a parked aggregate as it took the partition, while its fetch
//     was still below the aggregate's parked messages, handing the
//     aggregate's records fetched again over after the redrive unparked
//     it);
//   - per aggregate, a record's first successful handling comes after every
//     earlier record of the aggregate was handled, skipped, dead-lettered
//     or given up (never merely parked): handled messages follow offset
//     order, with gaps only for what was skipped or discarded;
//   - per aggregate, first deliveries came in offset order;
//   - no commit ever went past a record that had not finished when the
//     broker received the commit;
//   - the same order holds for the aggregates sent through the ingest,
//     whose messages are numbered across their local records, their
//     copies in Kafka and their records produced straight: a message's
//     first successful handling, locally or from its copy, comes after
//     every earlier message of the aggregate was handled, skipped or
//     dead-lettered, or given up for good by the ingest (answered 503, or
//     502 without a local finish: the caller was told, and that message
//     alone may be lost); a copy of such a message that turns up in Kafka
//     all the same must not be handled after a later message; handled
//     both locally and from its copy, a message is handled twice, not out
//     of order;
//   - every ingested message answered 202 was handled or dead-lettered: a
//     marked copy counts as finished from the moment it is in the log (a
//     commit may pass it before the ingest's answer names its offset; any
//     offset a commit passed unknown must turn out to be one), an
//     unmarked copy must be handled like any record; the answer is marked
//     exactly when the local try finished; every record in the topic at
//     the end was produced by the simulation or published by the ingest;
//     a copy published marked is never handled;
//   - once every partition is committed to its end, no member still holds
//     an aggregate for the ingest or a start barrier (within 10 s): a hold
//     never released would send the aggregate through Kafka until a
//     restart, slower but in order, which no order check sees;
//   - each member's commit counter (wowd_commits_total by result) agrees
//     with the answers to its commits that its client read from the broker
//     (its connections are read as they pass, wire_test.go): no more
//     commits counted ok than answers without an error; at least as many
//     counted failed as answers whose error ends the commit (not a
//     coordinator error, nor STALE_MEMBER_EPOCH, which franz-go may try
//     again); at least as many counted in all as answers that ended a
//     commit; and at least as many counted ok as answers without an error
//     read while their commit surely still waited: read at the instant its
//     request was written, by a commit that began after its member's
//     previous commit was answered for good, less than 2 s before, and not
//     at its stop's deadline. (A commit given up, past its timeout or the
//     stop's deadline, counts as failed, though its answer may still come
//     and be read.)
//   - no receiver held more unfinished records than its window, local
//     records included;
//   - no receiver kept fetching paused for max-parked for more than a
//     second with no failed message waiting to park (wowd_receiver_park_full
//     and wowd_receiver_park_waiting, sampled);
//   - a try that waits for its context sees it end by its deadline (plus
//     the deadline watcher's tick), whether its partition is owned,
//     draining after a revoke, or gone;
//   - per aggregate, first deliveries of the ingested messages came in
//     order too (messages given up for good passed over), and every local
//     admission ended by the time its member stopped: finished (and then
//     handled or skipped) or given up;
//   - once the faults and the churn stopped, every partition was committed
//     to its end within a bounded simulated time (longer where max-parked
//     is small: the partitions move on only as the operator unparks, so a
//     max-parked pause that outlives its cause shows here);
//   - a member that stopped gracefully committed at least the finished
//     prefix of every partition it owned when it was told to stop, and its
//     Stop returned within its deadline + 20 s (docs/operations.md,
//     "Stopping");
//   - with the HTTP sink: each try is acknowledged exactly once, by the
//     time the sink's Close returns, which it does by its member's stop
//     deadline (closed with it, as the daemon does), and done, skipped or
//     dead-lettered only where the server answered so to a request of that
//     try it still waited for; no request for a message reaches the
//     server before every earlier message of its aggregate was settled; a
//     batch holds one message per aggregate; a request the server holds
//     past the sink's request-timeout sees its context end; and no sink
//     sends more requests than its limit allows under the reloads: in any
//     second after a change, at most the larger of the two bursts plus
//     the rate plus one (seconds in which the member's network came back
//     from a cut left out: requests let go while it was cut off wait for
//     their connection and arrive together);
//   - with a blocking route: never more calls of the handler at once than
//     the blocking pool has goroutines, whatever path the call came by (a
//     first try, a held message's retry, a parked aggregate's redrive,
//     a retry of handler.WithRetry after its backoff);
//   - with the version check: no false gap: an aggregate parked at a
//     version gap (version n after last handled L) misses each of the
//     versions L+1..n-1 for real: none has a record in the partition
//     before the one parked at (never accepted into Kafka: the ingest gave
//     up on it, or answered 502, handled locally or not; or accepted only
//     after it); an operator's skip or discard needs no
//     allowance, as it forgets the aggregate's version; a redrive's park
//     at versions all settled and delivered again after a rewind for lost
//     records is allowed (documented; version_test.go says why); and no message
//     lost to the duplicate check: a message skipped as a duplicate is
//     not counted as handled, and its position counts as settled only if
//     the message, at any of its positions, was handled, skipped by the
//     handler, dead-lettered or given up for good by the ingest by then.
//     Local records given up at a gap, at the owner of their partition or
//     not, are documented behaviour, counted only (version_test.go);
//   - a record is handled more than once only for a cause of its own
//     (checkDuplicatesLocked in sim_test.go): the success of its try came
//     once the try's deadline may have passed (handler timeout or more
//     after the try began); an incarnation of its partition was let go
//     with it above that incarnation's last successful commit, whether it
//     finished there, was dropped or abandoned, or finished after the close
//     (the receiver logs the offsets at debug level as it closes the
//     incarnation: a crash, a cut, a failed or stalled commit, a stop past
//     its deadline and the sink's close canceling requests all count only
//     through it); the client rewound its partition from above it to it
//     or below; it was parked and a redrive of its aggregate was cut short
//     or failed to read its parked messages; or, for a whole partition, a
//     member lost that partition. Every partition a member's counters
//     count as lost, and every rewind they count, must be in what the
//     simulation read of its log.
//
// The CI run (`go test -tags synctests ./test/sim`) runs each of its fixed seeds twice,
// without and then with commit stalls (subtests seed=N and
// seed=N/stalls); `make sim SEEDS=N` runs the fixed seeds and N more, all
// with stalls (-stalls). A failure names its seed; the run replays with
//
//	go test -tags synctests ./test/sim -run TestSim -seed N -v          # seed=N
//	go test -tags synctests ./test/sim -run TestSim -seed N -stalls -v  # seed=N/stalls
//
// The tag builds franz-go with locks taken through channels: a goroutine
// waiting for a sync.Mutex is not durably blocked in a synctest bubble, and
// the bubble's clock stops while one waits (see TestMain); without it the
// package refuses to run.
//
// Goroutines still interleave differently from run to run, so a replay
// reproduces the same inputs and schedule of faults but not always the same
// interleaving.
package sim
