#!/usr/bin/env bash
# Breaks the promises of the guide's claims page (docs/claims.md) on purpose, one at a time,
# and checks that the tests it names then fail: each line below makes a one-line change to
# the library, runs the tests named for that promise, and undoes the change.
#
# Prints one line per change: "caught" (a named test failed), "MISSED" (they all passed),
# "HUNG" (the tests neither passed nor failed within BREAK_LIMIT, 600 s by default: the break
# shows, but as a hang), "STALE" (the text it changes has moved: update its line here) or
# "NOBUILD" (the change no longer compiles). Exits non-zero on a MISSED, STALE or NOBUILD one. Slow (each change rebuilds the library): not part of the test
# command; run it after changing a promise or the code behind one.
#
#   scripts/break-claims.sh            every change
#   scripts/break-claims.sh 'fifo|ack' only those whose promise matches (a regex)
#   DRY_RUN=1 scripts/break-claims.sh  only checks that every change still applies
#
# Needs no server: the MemoryQueue variants and the server-less tests run. With
# SQS_TEST_ENDPOINT set (scripts/with-sqs-server.sh scripts/break-claims.sh), the server
# variants of the named scenarios run too, and so do the breaks whose only tests need a server
# (S3 payloads: `breaks_on_server`); without one those print "skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
only="${1:-}"
# How long one break may take to build and fail its tests.
LIMIT=${BREAK_LIMIT:-600s}
log=target/break-claims.log
mkdir -p target
: >"$log"
missed=0
stale=0
hung=0
# The files changed by the break under way, each with its copy.
declare -A saved=()
restore() {
  local f
  for f in "${!saved[@]}"; do
    cp "${saved[$f]}" "$f"
    rm -f "${saved[$f]}"
  done
  saved=()
}
trap restore EXIT
trap 'restore; exit 130' INT TERM

# change FILE OLD NEW: OLD must occur exactly once in FILE.
change() {
  local file=$1 old=$2 new=$3
  # A file that has gone is stale, and must not come back empty at the restore.
  [ -f "$file" ] || return 1
  if [ -z "${saved[$file]:-}" ]; then
    saved[$file]=$(mktemp)
    cp "$file" "${saved[$file]}"
  fi
  python3 - "$file" "$old" "$new" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(1)
open(path, "w").write(text.replace(old, new))
PY
}

# breaks PROMISE FILE OLD NEW [--also FILE OLD NEW]... -- CARGO-TEST-ARGS...
# A promise kept in two places (say, the keeper told to let go, and the keeper skipping a
# settled lease) is broken in both with --also.
breaks() {
  local promise=$1
  shift
  if [[ -n $only && ! ${promise,,} =~ ${only,,} ]]; then return; fi
  local what=""
  while [ "$1" != "--" ]; do
    [ "$1" = "--also" ] && shift
    if ! change "$1" "$2" "$3"; then
      restore
      echo "STALE   $promise: '$2' is not in $1 exactly once"
      stale=$((stale + 1))
      return
    fi
    what="$what${what:+; }$1: $3"
    shift 3
  done
  shift
  echo "== $promise: $what" >>"$log"
  if [ -n "${DRY_RUN:-}" ]; then
    echo "applies $promise"
    restore
    return
  fi
  # Bounded: a break that makes a test hang is reported as such, not waited for.
  local before
  before=$(wc -l <"$log")
  timeout --kill-after=10 "$LIMIT" cargo test --all-features "$@" >>"$log" 2>&1
  local status=$?
  # A break that does not compile proves nothing about the tests.
  if tail -n +"$((before + 1))" "$log" | grep -q "could not compile"; then
    echo "NOBUILD $promise ($what): the change does not compile; update its line here"
    stale=$((stale + 1))
    restore
    return
  fi
  case $status in
    0)
      echo "MISSED  $promise ($what)"
      missed=$((missed + 1))
      ;;
    124 | 137)
      echo "HUNG    $promise ($what): no test failed within $LIMIT"
      hung=$((hung + 1))
      ;;
    *) echo "caught  $promise ($what)" ;;
  esac
  restore
}

# breaks_on_server ...: as breaks, for a promise only tests against a server prove.
breaks_on_server() {
  if [ -z "${SQS_TEST_ENDPOINT:-}" ]; then
    if [[ -z $only || ${1,,} =~ ${only,,} ]]; then echo "skipped $1 (needs a server)"; fi
    return
  fi
  breaks "$@"
}

# --- Guarantees
breaks "a held delivery is never handed to anyone else" src/heartbeat.rs \
  'Some(ext) => (Next::Extend, ext.at),' \
  'Some(_) => (Next::Expire(LostReason::HardDeadline), lease.deadline()),' \
  -- --test scenarios a_handler_holding_three_timeouts_is_never_redelivered
breaks "the last extension ends 12 hours after the request" src/delivery.rs \
  'received.received_at,' 'received.returned_at,' \
  -- --test handler_details the_12_hour_cap_counts_from_the_request
breaks "the first deadline counts from the answer of a long poll" src/lease.rs \
  'let deadline = left_sqs + t;' 'let deadline = received_at + t;' \
  -- --test consumer a_message_handed_out_late_in_a_long_poll_gets_its_whole_timeout
breaks "the first deadline allows for the answer's way back" src/lease.rs \
  'let deadline = left_sqs + t;' 'let deadline = handed_out + t;' \
  -- --lib the_first_deadline_allows_for_the_answers_way_back_never_before_the_request
breaks "received_at and deadline are kept to the millisecond, never later" src/millis.rs \
  'Millis(whole(instant - self.0))' 'Millis(whole(instant - self.0) + 1)' \
  -- --lib millis::tests::an_instant_kept_in_millis
breaks "received_at and deadline are kept to the millisecond, never later (before the epoch)" src/millis.rs \
  'let part = i64::from(!before.subsec_nanos().is_multiple_of(1_000_000));' 'let part = 0;' \
  -- --lib millis::tests::an_instant_kept_in_millis
breaks "received_at and deadline are kept to the millisecond, never later (a deadline)" src/millis.rs \
  'u32::try_from(instant.saturating_duration_since(start).as_millis())' 'u32::try_from(instant.saturating_duration_since(start).as_millis() + 1)' \
  -- --lib millis::tests::millis_after
breaks "no extension is sent later than T/4 before its deadline" src/limits.rs \
  '(timeout / 4).min(Duration::from_secs(1))' \
  'Duration::from_secs(1)' \
  -- --lib with_a_short_timeout_the_send_margin_and_the_late_threshold_are_a_quarter_of_it
breaks "ack, release and drop each stop the heartbeat" src/delivery.rs \
  'self.run.keeper.let_go(&self.lease);' '' \
  --also src/heartbeat.rs 'if !lease.is_extendable() {' 'if false {' \
  -- --lib ack_release_and_drop_each_stop_the_heartbeat
breaks "a dropped delivery comes back when its timeout lapses" src/lease.rs \
  'let visibility = if shutting_down {' 'let visibility = if true {' \
  -- --test scenarios a_dropped_delivery_comes_back_after_about_its_timeout
breaks "release makes the message visible at once" src/delivery.rs \
  'self.change_and_settle(0).await' 'self.change_and_settle(5).await' \
  -- --test scenarios release_makes_the_message_visible_at_once
breaks "release_after makes it visible after its delay" src/delivery.rs \
  '});
        }
        self.change_and_settle(secs).await' '});
        }
        self.change_and_settle(0).await' \
  -- --test scenarios release_after_makes_it_visible_after_the_delay
breaks "a delivery held elsewhere keeps its max_in_flight slot until dropped" src/delivery.rs \
  'semaphore.add_permits(n - 1);' 'semaphore.add_permits(n);' \
  -- --test consumer a_delivery_moved_elsewhere_keeps_its_slot_until_dropped
breaks "receives ask for no more than the free slots" src/receiver.rs \
  'max_messages: u32::try_from(slots.len()).unwrap_or(settings.batch_size),' \
  'max_messages: settings.batch_size,' \
  -- --test consumer receives_only_while_a_slot_is_free_and_never_asks_for_more
breaks "a stop abandons no receive" src/receiver.rs \
  '() = stop.cancelled(), if !halted => continue,' '() = stop.cancelled(), if !halted => return Ok(()),' \
  -- --test edges a_stop_while_a_poll_waits_hands_out_what_it_brings
breaks "a pause abandons no receive" src/receiver.rs \
  '_ = paused.wait_for(|p| *p), if !halted && !pausing => continue,' \
  '_ = paused.wait_for(|p| *p), if !halted && !pausing => { receives.clear(); continue }' \
  -- --test edges a_pause_while_a_poll_waits_handles_what_it_brings
breaks "a dropped stream abandons no receive" src/stream.rs \
  'drop(pump); // detached' 'pump.abort(); // detached' \
  -- --test edges a_stream_dropped_while_its_poll_waits_releases_what_the_poll_brings
breaks "a late arrival reaches no handler" src/dispatch.rs \
  'if late.is_cancelled() {
            // Received after' 'if false {
            // Received after' \
  -- --test lifecycle a_late_arrival_reaches_no_handler_and_waits_for_the_other_receives
breaks "graceful shutdown releases what is still held at its timeout" src/lease.rs \
  'let visibility = if shutting_down {
            Some(0)' 'let visibility = if shutting_down {
            None' \
  -- --test lifecycle at_the_shutdown_timeout_held_messages_are_released_and_visible_at_once
breaks "a stream's graceful end waits for what it yielded" src/stream.rs \
  'if (graceful || stop.is_cancelled()) && !token.is_cancelled() {' \
  'if false && (graceful || stop.is_cancelled()) && !token.is_cancelled() {' \
  -- --test handler_model stream_until_drains_like_run_until
breaks "fifo: one delivery of a group at a time" src/fifo.rs \
  'let Some(group) = d.message_group_id().map(str::to_owned) else {' \
  'let Some(group) = None::<String> else {' \
  -- --test scenarios fifo_groups_are_handled_in_send_order_one_message_at_a_time
breaks "fifo: the rest of a group is released after a failure" src/fifo.rs \
  'if end != End::Acked || shutdown.is_cancelled() {' 'if shutdown.is_cancelled() {' \
  -- --test scenarios fifo_a_released_message_holds_back_the_rest_of_its_group
breaks "OnSuccess acks once, never a stale delivery" src/lease.rs \
  'dropped = Dropped::Deferred;' 'dropped = Dropped::Unsettled;' \
  -- --test edges a_delivery_dropped_in_its_handler_is_kept_until_on_success_acks_it_once
breaks "an ack answered after its deadline is lost, not ok" src/lease.rs \
  'if Instant::now() > self.deadline() {' 'if Instant::now() > self.deadline() && false {' \
  -- --lib a_delete_answered_after_the_deadline_is_no_ack
breaks "a settling lease whose deadline passes unextended is lost" src/heartbeat.rs \
  'let reason = LostReason::LapsedBeforeAnswer;
                self.schedule(id, Next::Expire(reason), lease.deadline());' \
  'self.forget(id);' \
  -- --lib an_ack_unanswered_at_its_deadline_is_lost_there_and_reported_lost
breaks "an ack's delete still unanswered at the last safe moment is extended" src/heartbeat.rs \
  'if !lease.is_deleting() {
            return None;' \
  'if !lease.is_deleting() || true {
            return None;' \
  -- --lib a_delete_still_under_way_at_the_last_safe_moment_is_extended_then
breaks "an ack waiting between tries is lost when its deadline passes" src/lease.rs \
  'held(s) || matches!(s, State::Abandoned | State::Settling | State::SettleWaiting)' \
  'held(s) || matches!(s, State::Abandoned | State::Settling)' \
  -- --test edges outage_longer_than_the_timeout
breaks "a transient failure of a lapsed ack is reported lost" src/lease.rs \
  '(Err(err), _) if err.is_retryable() => match self.lost_reason() {' \
  '(Err(err), _) if err.is_retryable() && false => match self.lost_reason() {' \
  -- --test edges outage_longer_than_the_timeout
breaks "a dropped run abandons no poll" src/receiver.rs \
  'let result = detached_receive::receive(&self.queue, request).await;' \
  'let result = self.queue.receive(crate::queue::Receive { max_messages: request.max_messages, wait: request.wait, visibility: request.visibility, message_attribute_names: &request.message_attribute_names, system_attribute_names: &request.system_attribute_names }).await;' \
  -- --test edges a_run_dropped_while_its_poll_waits
breaks "what a dropped run's poll brings is released" src/detached_receive.rs \
  'let queue = self.queue.clone();' 'let queue = self.queue.clone(); let messages = Vec::new();' \
  -- --test edges a_run_dropped_while_its_poll_waits
breaks "an ack of a lost delivery still sends its delete" src/delivery.rs \
  'let lost_before = self.begin_ack();
        let lease = &self.lease;' \
  'let lost_before = self.begin_ack();
        if lost_before.is_some() { return self.finish_ack(Ok(()), lost_before); }
        let lease = &self.lease;' \
  -- --lib an_invalid_receipt_handle_loses_the_delivery
breaks "a message whose ack was lost is deleted on redelivery" src/unfinished_deletes.rs \
  'let unfinished = inner.ids.remove(message_id)?;' 'let unfinished = inner.ids.remove(message_id).filter(|_| false)?;' \
  -- --test lifecycle a_message_whose_ack_was_lost_is_deleted_on_redelivery_without_the_handler
breaks "nothing is lost or handled twice unexplained under faults" src/batch.rs \
  'let _ = entry.reply.send(Err(Error::replicate(&err)));' 'let _ = entry.reply.send(Ok(()));' \
  -- --test faults under_injected_faults_on_an_atomic_queue
breaks "a blocked runtime does not starve the isolated keeper" src/config.rs \
  'let lease_queue = (placement == KeeperPlacement::OwnThread).then(|| queue.clone());' \
  'let lease_queue = (placement == KeeperPlacement::OwnThread).then(|| queue.clone()).filter(|_| false);' \
  -- --test keeper an_isolated_keeper_survives_a_blocked_runtime_memory

# --- Errors and retries
breaks "fatal receive errors end run at once" src/receiver.rs \
  'Err(err) if err.is_fatal() => {' 'Err(err) if false && err.is_fatal() => {' \
  -- --test error_mapping receive_errors_end_the_run_when_fatal
breaks "the receive back-off stops at 20 s" src/call_retries.rs \
  'longest: Duration::from_secs(20),' 'longest: Duration::from_secs(40),' \
  -- --test consumer receive_failures_back_off_from_200_ms_doubling_to_at_most_20_s
breaks "empty short polls back off to at most 2 s" src/call_retries.rs \
  'first: Duration::from_millis(50),
    longest: Duration::from_secs(2),' 'first: Duration::from_millis(50),
    longest: Duration::from_secs(4),' \
  -- --test consumer empty_short_polls_back_off_from_50_ms_doubling_to_at_most_2_s
breaks "an extension loses its delivery only when SQS says the message is gone" src/heartbeat.rs \
  '} else if err.refuses_visibility() {' '} else if err.refuses_visibility() || err.is_fatal() {' \
  -- --test error_mapping extension_errors_lose_the_delivery_only_when_sqs_says_it_is_gone
breaks "an extension error classed by code: KMS keys disabled is not lost" src/error.rs \
  'rule("KmsDisabled", Class::Fatal),' 'rule("KmsDisabled", Class::Lost(LostReason::NotInFlight)),' \
  -- --test error_mapping extension_errors_lose_the_delivery_only_when_sqs_says_it_is_gone
breaks "an ack retries transient errors" src/context.rs \
  'Settle::Delete => Instant::now() < started + ACK_RETRY_WINDOW,' 'Settle::Delete => false,' \
  -- --test error_mapping ack_errors_are_lost_fatal_or_retried
breaks "an ack does not retry fatal errors" src/context.rs \
  'Err(err) if err.is_retryable() && hooks.still_ours() => {
                let retries' 'Err(err) if hooks.still_ours() => {
                let retries' \
  --also src/context.rs \
  'if !(err.is_retryable() && more && hooks.still_ours()) {' 'if !(more && hooks.still_ours()) {' \
  -- --test error_mapping ack_errors_are_lost_fatal_or_retried
breaks "a release tries 4 times on transient errors" src/call_retries.rs \
  'pub(crate) const RELEASE_ATTEMPTS: u32 = 4;' 'pub(crate) const RELEASE_ATTEMPTS: u32 = 5;' \
  -- --lib a_release_tries_four_times_on_transient_errors_and_once_on_others
breaks "every call has a bounded time: receive" src/queue/mod.rs \
  'let limit = request.wait + self.request_timeout;' 'let limit = request.wait + self.request_timeout * 100;' \
  -- --test error_mapping an_unanswered_receive_times_out_and_is_retried
breaks "every call has a bounded time: delete" src/queue/mod.rs \
  'within(self.request_timeout, operation, call)' 'within(self.request_timeout * 100, operation, call)' \
  -- --test error_mapping an_unanswered_ack_times_out_as_a_retryable_error
breaks "every call has a bounded time: extension" src/queue/mod.rs \
  'within(self.request_timeout, operation, call)' 'within(self.request_timeout * 100, operation, call)' \
  -- --test error_mapping an_unanswered_extension_loses_the_delivery_at_its_deadline_not_later
breaks "the SDK makes one attempt per call" src/queue/sdk.rs \
  '.retry_config(RetryConfig::disabled())' '.retry_config(RetryConfig::standard())' \
  -- --test error_mapping the_sdk_makes_one_attempt_per_call

# --- Bad input
breaks "build() refuses a setting out of range, naming it" src/config.rs \
  'limits::in_range("batch_size", self.batch_size, 1..=max_batch, "1..=10")?' \
  'limits::in_range("batch_size", self.batch_size, 0..=max_batch, "1..=10")?' \
  -- --lib out_of_range_settings_are_refused
breaks "release_after past the 12-hour limit is refused" src/delivery.rs \
  'if Duration::from_secs(u64::from(secs)) > room {' 'if false {' \
  -- --lib release_after_hides_for_the_delay_and_refuses_past_the_limit
breaks "a message without a receipt handle is skipped and frees its slot" src/dispatch.rs \
  '"skipped a message without a receipt handle");' \
  '"skipped a message without a receipt handle"); std::mem::forget(slot);' \
  -- --test sdk_errors a_message_without_receipt_handle_is_skipped_and_the_consumer_goes_on
breaks "a body that does not decode: json() says why" src/json.rs \
  'expected: format!("JSON for {}", std::any::type_name::<T>()),' 'expected: String::new(),' \
  -- --test integrations sns_envelopes_and_json_bodies_decode_and_bad_ones_are_refused
breaks "a queue whose own visibility timeout is 0 fails at start" src/receiver.rs \
  '0 => Err(Error::InvalidConfig {' '0 if false => Err(Error::InvalidConfig {' \
  -- --test edges a_queue_whose_own_visibility_timeout_is_zero_fails_at_start
breaks "a malformed queue is refused naming the rule" src/queue_ref.rs \
  'if is_queue_name(given) {' 'if !given.is_empty() {' \
  -- --lib malformed_queues_are_refused_naming_the_rule
breaks "an ARN of another region is refused" src/config.rs \
  '(Some(arn), Some(client)) if arn != client => Err(Error::invalid(' \
  '(Some(arn), Some(client)) if false && arn != client => Err(Error::invalid(' \
  -- --lib a_malformed_queue_or_an_arn_of_another_region_is_refused
breaks "a queue given by name or ARN costs one GetQueueUrl" src/queue/sdk.rs \
  'if let Some(url) = self.target.url.get() {' \
  'if let Some(url) = self.target.url.get().filter(|_| false) {' \
  -- --test queues a_name_is_resolved_once_and_its_url_used_for_every_call
breaks "a queue that does not exist is an error naming it" src/queue/sdk.rs \
  'message: format!("queue `{queue}`: {message}"),' 'message,' \
  -- --test queues a_missing_name_ends_run_after_one_request_naming_it

# --- Logs, stats and limits
breaks "logs use the documented levels" src/handling.rs \
  'tracing::warn!(error = %chain, "handler failed");' \
  'tracing::info!(error = %chain, "handler failed");' \
  -- --test logs logs_never_carry_bodies_or_whole_receipt_handles_and_name_the_message
breaks "every delivery has its sent time whatever attributes are selected" src/config.rs \
  '        MessageSystemAttributeName::SentTimestamp,
    ] {' '    ] {' \
  -- --test queues a_delivery_knows_when_its_message_was_sent
breaks "backlog() has the queue's three counts" src/queue/sdk.rs \
  'count(A::ApproximateNumberOfMessagesNotVisible),
                count(A::ApproximateNumberOfMessagesDelayed),' \
  'count(A::ApproximateNumberOfMessagesDelayed),
                count(A::ApproximateNumberOfMessagesNotVisible),' \
  -- --test queues the_backlog_maps_each_count_to_its_field
# --- S3 payloads
breaks "pointers are known by both attribute names and both class names" src/payload.rs \
  ".is_some_and(|prefix| prefix.ends_with('.'));" '.is_some_and(|prefix| prefix.is_empty());' \
  -- --lib both_attribute_names_and_both_class_names_are_pointers
breaks "a payload over max_payload_bytes is refused" src/s3.rs \
  'if size > self.max_bytes {' 'if size > self.max_bytes * 2 {' \
  -- --lib sizes_over_the_limit_or_not_as_declared_and_bodies_not_utf8_are_refused
breaks "s3 errors are fatal unless throttling or 5xx" src/s3.rs \
  'let transient = status >= 500' 'let transient = status >= 600' \
  -- --lib s3_errors_are_fatal_unless_throttling_or_5xx
breaks_on_server "an unreadable payload reaches no handler and is counted" src/payloads.rs \
  'delivery.context().count(Counter::PayloadFailures);' '' \
  -- --test payloads unreadable_payloads_reach_no_handler
breaks_on_server "transient s3 failures are tried 4 times" src/call_retries.rs \
  'pub(crate) const PAYLOAD_ATTEMPTS: u32 = 4;' 'pub(crate) const PAYLOAD_ATTEMPTS: u32 = 5;' \
  -- --test payloads a_failing_s3_is_tried_four_times
breaks_on_server "payload objects are kept unless delete_payload_on_ack" src/config.rs \
  'delete_on_ack: false,' 'delete_on_ack: true,' \
  -- --test payloads pointers_as_the_java_and_python_libraries_write_them_are_read
breaks_on_server "a payload object is deleted only after the sqs delete succeeded" src/lease.rs \
  '(Err(err), _) => return Err(err),' \
  '(Err(err), _) => { if let Some(l) = self.payload_location() { self.ctx.delete_payload(l, &self.span); } return Err(err) }' \
  -- --test payloads delete_on_ack_deletes_the_object_only_after_the_sqs_delete
breaks_on_server "poison payloads: the dead-letter step after the retry policy" src/payloads.rs \
  'if let Err(failed) = delivery.give_up(failure).await {' \
  'let _ = failure; if let Err(failed) = delivery.meet_retry_policy().await {' \
  -- --test payloads poison_payloads_meet_the_retry_policy_then_the_dead_letter_step
breaks "payload buckets: a pointer to another bucket is never read" src/s3.rs \
  'if !allowed.iter().any(|b| b == bucket) {' 'if !allowed.iter().any(|b| b == bucket) && false {' \
  -- --lib a_pointer_to_a_bucket_not_listed_is_refused_without_a_request
breaks "payload buckets: s3_payloads alone is refused" src/config.rs \
  'PayloadBuckets::Unset => Err(Error::invalid("payload_buckets", "none", ALLOWED)),' \
  'PayloadBuckets::Unset => Ok(None),' \
  -- --lib payload_settings_are_checked_and_pointers_are_always_recognisable
breaks_on_server "the lease is kept while a payload downloads" src/payloads.rs \
  'let lost = delivery.lost();' 'let lost = delivery.lost(); delivery.keeper().let_go(delivery.lease());' \
  -- --test payloads a_slow_download_keeps_the_message_hidden
breaks_on_server "a stop lets a payload download end within the shutdown timeout" src/dispatch.rs \
  'let drained = tokio::time::timeout_at(deadline, async {' 'let drained = tokio::time::timeout_at(Instant::now(), async {' \
  -- --test payloads a_stop_during_a_download_waits_for_it
breaks_on_server "a download still going at the shutdown timeout is cut off and released" src/dispatch.rs \
  'groups.shutdown().await;' 'while groups.join_next().await.is_some() {}' \
  -- --test payloads a_download_outlasting_the_shutdown_timeout
breaks "every counter lands in its own stats field" src/stats.rs \
  'handler_errors: get(Counter::HandlerErrors),
            handler_panics: get(Counter::HandlerPanics),' \
  'handler_errors: get(Counter::HandlerPanics),
            handler_panics: get(Counter::HandlerErrors),' \
  -- --lib every_counter_has_a_field_of_its_own
breaks "consumers sharing an InFlightLimit never hold more together" src/delivery.rs \
  'shared: shared.and_then(hold_one),' 'shared: shared.and(None),' \
  -- --test integrations three_consumers_sharing_a_limit_never_hold_more
breaks "AckMode::Always acks on every outcome" src/handling.rs \
  '(_, AckMode::Always) | (Outcome::Ok, AckMode::OnSuccess) => {' \
  '(Outcome::Ok, AckMode::Always) | (Outcome::Ok, AckMode::OnSuccess) => {' \
  -- --test handler_model always_acks_on_ok_err_panic_and_timeout
breaks "a handler past handler_timeout is stopped" src/handling.rs \
  'Some(limit) => match tokio::time::timeout(limit, guarded).await {' \
  'Some(limit) => match tokio::time::timeout(limit * 100, guarded).await {' \
  -- --test handler_model a_handler_past_its_timeout_is_stopped
breaks "a receive asks for no more messages than its tokens" src/receiver.rs \
  'let (granted, tokens) = Tokens::take(limits, want, at_least).await;
        slots.truncate(granted);' \
  'let (_, tokens) = Tokens::take(limits, want, at_least).await;' \
  -- --test flow_control rate
breaks "tokens a receive held and did not use go back" src/rate_limit.rs \
  'for (limit, taken) in self.taken.drain(..) {
            limit.give_back(taken);' \
  'for (limit, taken) in self.taken.drain(..) {
            limit.settle(taken, taken, Duration::ZERO);' \
  -- --lib rate_limit
breaks "a long poll's messages are paid for when they arrive" src/rate_limit.rs \
  'bucket.tokens = if out_for.as_secs_f64() * per_second >= taken as f64 {' \
  'bucket.tokens = if out_for.as_secs_f64() * per_second >= taken as f64 * 1e9 {' \
  -- --lib rate_limit
breaks "cancel_on_lost drops the handler of a lost delivery" src/handling.rs \
  '() = handed.all_lost() => None,' '() = std::future::pending() => None,' \
  -- --test flow_control cancel_on_lost_drops_the_handler
breaks "a batch handler is dropped only once its whole batch is lost" src/handling.rs \
  'async fn all_lost(&self) {
        for item in self.items.as_slice() {' \
  'async fn all_lost(&self) {
        for item in self.items.as_slice().iter().take(1) {' \
  -- --test flow_control cancel_on_lost_drops_a_batch_handler
breaks "a batch is handed over when its window has passed" src/batch_window.rs \
  '() = sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {' \
  '() = sleep_until(due.unwrap_or_else(Instant::now)), if false => {' \
  -- --test flow_control a_batch_is_handed_over_when_full
breaks "a full batch is handed over at once" src/batch_window.rs \
  'while self.deliveries.len() >= self.batching.max {' \
  'while self.deliveries.len() > self.batching.max {' \
  -- --test flow_control a_batch_is_handed_over_when_full
breaks "a shutdown hands a filling batch over" src/dispatch.rs \
  'drop(collector);' 'let _collector = collector;' \
  -- --test flow_control a_shutdown_hands_a_filling_batch_over
breaks "a pause while a receive waits for its token takes nothing" src/receiver.rs \
  '_ = paused.wait_for(|p| *p) => break,' \
  '_ = paused.wait_for(|p| *p && false) => break,' \
  -- --test flow_control a_pause_while_a_receive_waits
breaks "dead-letter: a failure moves the message exactly at its after_receives-th receive" src/dead_letter.rs \
  'receive_count >= self.after_receives' 'receive_count > self.after_receives' \
  -- --test dead_letter a_poison_message_moves
breaks "dead-letter: the copy carries the failure attribute" src/dead_letter.rs \
  'attributes.insert(FAILURE_ATTRIBUTE.to_owned(), value);' 'let _ = value;' \
  -- --test dead_letter a_poison_message_moves
breaks "dead-letter: an original with 10 attributes is copied with them all" src/dead_letter.rs \
  '|| attributes.len() < MAX_ATTRIBUTES;' '|| attributes.len() <= MAX_ATTRIBUTES;' \
  -- --test dead_letter a_message_with_ten_attributes
breaks "dead-letter: a FIFO copy keeps its group" src/dead_letter.rs \
  'group_id: group_id.filter(|_| fifo),' 'group_id: group_id.filter(|_| false),' \
  -- --test dead_letter a_fifo_copy_keeps_its_group
breaks "dead-letter: a failure in every ack mode is moved" src/handling.rs \
  'Outcome::Failed(failure) => self.dead_letter_due(abandoned, failure).await,' \
  'Outcome::Failed(failure) if self.ack_mode != AckMode::Always => self.dead_letter_due(abandoned, failure).await,' \
  -- --test dead_letter a_panic_and_a_timeout
breaks "dead-letter: a failed batch moves only its due deliveries" src/handling.rs \
  '*left == Left::Abandoned && dead_letter.is_due(item.lease.receive_count())' \
  '*left == Left::Abandoned' \
  -- --test dead_letter a_failed_batch_moves
breaks "dead-letter: a copy not sent leaves the message to the retry policy" src/handling.rs \
  'Moved::NotSent(_) => self.release(item),' 'Moved::NotSent(_) => item.lease.end(),' \
  -- --test dead_letter a_copy_that_cannot_be_sent
breaks "dead-letter: a move whose delete failed is finished by the next receive, without a second copy" src/lease.rs \
  'self.ctx.remember_unfinished(message_id, Unfinished::Move);' '' \
  -- --test dead_letter a_failure_between_the_send_and_the_delete
breaks "dead-letter: a move finished by the next receive is counted" src/dispatch.rs \
  'settle.count(Counter::DeadLettered);' '' \
  -- --test dead_letter a_failure_between_the_send_and_the_delete
breaks_on_server "dead-letter: a payload moves as its pointer and its object stays" src/dead_letter_move.rs \
  'match lease.finish_move(result, lost_before) {' 'match lease.finish_ack(result, lost_before) {' \
  -- --test payloads a_dead_lettered_payload_keeps_its_pointer
breaks "cost: the acks of one receive wait for each other with no request under way" src/batch.rs \
  'Some(oldest) if expecting && !round_trip.is_zero() => {' 'Some(oldest) if false => {' \
  -- --lib batch::tests::the_acks_of_one_receive
breaks "cost: the first receive's acks wait for each other on the round trip of the queue's other calls" src/queue/mod.rs \
  'if answer.is_ok() {' 'if answer.is_ok() && operation != "GetQueueAttributes" {' \
  -- --test consumer --lib the_first_
breaks "cost: the keeper's own client shares the queue's round trip" src/config.rs \
  '(_, Some(own)) => Some(queue.through(own)),' '(_, Some(own)) => Some(Queue::new(own)),' \
  -- --lib the_keepers_own_client
breaks "cost: the acks of one receive wait for each other when a request comes back" src/batch.rs \
  'Some(until) => wait_for_cohorts(&bell, &mut rx, &mut waiting, until).await,' 'Some(until) => tokio::select! { () = wait_for_cohorts(&bell, &mut rx, &mut waiting, until) => {} () = answer => break, },' \
  -- --lib batch::tests::an_answer_does_not_send
breaks "cost: an ack waits for its receive's others at most one round trip" src/batch.rs \
  'let until = oldest + round_trip;' 'let until = oldest + Duration::from_secs(3600);' \
  -- --lib batch::tests::an_ack_waits_for_its_cohort
breaks "cost: an ack that cannot end its cohort's wait does not wake the batcher" src/batch.rs \
  'if unsent >= MAX_BATCH || cohort.is_none_or(|c| !c.has_unsettled()) {' 'if true {' \
  -- --lib batch::tests::acks_that_cannot_end
breaks "cost: the last ack of a cohort ends its wait at once" src/batch.rs \
  'if unsent >= MAX_BATCH || cohort.is_none_or(|c| !c.has_unsettled()) {' 'if unsent >= MAX_BATCH {' \
  -- --lib batch::tests::acks_that_cannot_end
breaks "cost: a batch filled while its cohorts are awaited goes at once" src/batch.rs \
  'if unsent >= MAX_BATCH || cohort.is_none_or(|c| !c.has_unsettled()) {' 'if cohort.is_none_or(|c| !c.has_unsettled()) {' \
  -- --lib batch::tests::a_batch_filled_while
breaks "cost: failures released at once go in requests of 10" src/batch.rs \
  'if batch.len() == MAX_BATCH {' 'if batch.len() == 1 {' \
  -- --test consumer failures_released_at_once
breaks "receives: a run's receive loop runs on a worker" src/dispatch.rs \
  'Looping::Task(runtime.spawn(receiving.in_current_span().with_current_subscriber()))' 'Looping::InPlace(Box::pin(receiving))' \
  -- --test integrations a_runs_receive_loop
breaks "receives: a run's receive loop runs in the caller's span" src/dispatch.rs \
  'Looping::Task(runtime.spawn(receiving.in_current_span().with_current_subscriber()))' 'Looping::Task(runtime.spawn(receiving.with_current_subscriber()))' \
  -- --test integrations a_runs_receive_loop
breaks "receives: a run's receive loop logs to the caller's subscriber" src/dispatch.rs \
  'Looping::Task(runtime.spawn(receiving.in_current_span().with_current_subscriber()))' 'Looping::Task(runtime.spawn(receiving.in_current_span()))' \
  -- --test logs a_subscriber_for_the_awaiting_thread
breaks "logs: a run's handler tasks log to the caller's subscriber" src/dispatch.rs \
  '                            .with_current_subscriber(),' '' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the_handlers
breaks "logs: a batch window's collector logs to the caller's subscriber" src/dispatch.rs \
  'groups.spawn(task.with_current_subscriber());' 'groups.spawn(task);' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the_batch
breaks "logs: a batch handler's task logs to the caller's subscriber" src/dispatch.rs \
  'groups.spawn(batch.with_current_subscriber());' 'groups.spawn(batch);' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the_batch
breaks "logs: a window's batches log to the caller's subscriber" src/batch_window.rs \
  'handed.spawn(hand_over(batch).with_current_subscriber());' 'handed.spawn(hand_over(batch));' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the_batch
breaks "logs: a stream's loop logs to the caller's subscriber" src/stream.rs \
  'let pump = tokio::spawn(pump.with_current_subscriber());' 'let pump = tokio::spawn(pump);' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the_stream
breaks "logs: the keeper logs to the caller's subscriber" src/lease_thread.rs \
  'runtime.spawn(task.with_current_subscriber());' 'runtime.spawn(task);' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the
breaks "logs: a settle's retries log to the caller's subscriber" src/context.rs \
  '                    .with_current_subscriber(),' '                    ,' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the
breaks "logs: a settle call run to its end logs to the caller's subscriber" src/context.rs \
  '.spawn_on(settle.with_current_subscriber(), runtime);' '.spawn_on(settle, runtime);' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the
breaks "logs: a batch request logs to the caller's subscriber" src/batch.rs \
  'tokio::spawn(request.with_current_subscriber());' 'tokio::spawn(request);' \
  -- --test logs a_subscriber_for_the_awaiting_thread_gets_the
breaks "receives: a run's future dropped ends its receive loop" src/dispatch.rs \
  '            task.abort();' '            let _ = task;' \
  -- --test lifecycle dropping_the_run_future
breaks "receives: a receive dropped before its answer ends its task" src/queue/sdk.rs \
  '        self.0.abort();' '        let _ = &self.0;' \
  -- --lib queue::sdk::tests::a_call_dropped
breaks "receives: a receive's task runs in the caller's span" src/queue/sdk.rs \
  'let call = call.in_current_span().with_current_subscriber();' 'let call = call.with_current_subscriber();' \
  -- --lib queue::sdk::tests::a_call_made_a_task
breaks "receives: a receive's task logs to the caller's subscriber" src/queue/sdk.rs \
  'let call = call.in_current_span().with_current_subscriber();' 'let call = call.in_current_span();' \
  -- --lib queue::sdk::tests::a_call_made_a_task
breaks "receives: one fewer under way for each short answer" src/receiver.rs \
  'Load::Quiet => state.target = state.target.saturating_sub(1).max(1),' 'Load::Quiet => {}' \
  -- --test consumer short_answers
breaks "receives: one more under way for each full answer" src/receiver.rs \
  'state.target += 1;' 'state.target += 0;' \
  -- --test consumer concurrent_receives_keep
breaks "receives: an empty answer brings them back to one long poll" src/receiver.rs \
  $'ReceiveOutcome::Empty => {\n                state.target = 1;' \
  $'ReceiveOutcome::Empty => {\n                state.target = state.target.max(1);' \
  -- --test consumer a_drained_queue
breaks "receives: releases at once bring them back to one" src/receiver.rs \
  'if self.releases_at_once.count() != at_send {' 'if false {' \
  -- --test consumer releases_at_once
breaks "receives: releases at once count from each receive's sending" src/receiver.rs \
  'let releases_at_send = self.releases_at_once.count();' 'let releases_at_send = 0;' \
  -- --test consumer releases_at_once
breaks "adaptive: each receive asks for the estimate" src/receiver.rs \
  'let estimate = adaptive.timeout(timeout);' 'let estimate = timeout;' \
  -- --test scenarios --test handler_details adaptive_visibility
breaks "adaptive: the estimate stays within [min, max]" src/adaptive_visibility.rs \
  '(secs as u32).clamp(self.min, self.max)' '(secs as u32).max(1)' \
  -- --lib adaptive_visibility
breaks "adaptive: twice the quantile (the heartbeat extends halfway)" src/adaptive_visibility.rs \
  'pub(crate) const MARGIN: f64 = 2.0;' 'pub(crate) const MARGIN: f64 = 1.0;' \
  -- --lib adaptive_visibility
breaks "adaptive: newer holds weigh more (a burst raises it within four)" src/adaptive_visibility.rs \
  'weight *= DECAY;' 'weight *= 1.0;' \
  -- --lib adaptive_visibility
breaks "adaptive: a lost delivery's hold is not counted" src/lease.rs \
  'if lost_reason(state).is_none() {' 'if true {' \
  -- --lib lease::tests::a_hold_counts
breaks "adaptive: a hold counts from the answer, not the request" src/lease.rs \
  'self.ctx.held_since(self.received_at() + answered_after);' 'self.ctx.held_since(self.received_at());' \
  -- --lib lease::tests::a_hold_counts
breaks "adaptive: stats show the timeout in force" src/dispatch.rs \
  'ctx.visibility_applied(batch.timeout);' '' \
  -- --test scenarios --test handler_details adaptive_visibility
breaks "adaptive: the gauge shows the timeout in force" src/stats.rs \
  'exported.visibility_timeout.set(f64::from(secs));' '' \
  -- --test integrations metrics_go_through_the_facade

echo "missed: $missed, stale: $stale, hung: $hung (the output of every run: $log)"
[ "$missed" -eq 0 ] && [ "$stale" -eq 0 ]
