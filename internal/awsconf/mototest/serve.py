import sys, threading, time
import moto
# The patches below reach into moto 5.2's internals; another version may
# route or store requests differently, so say so rather than misbehave.
if not moto.__version__.startswith("5.2."):
    sys.exit(f"serve.py patches moto 5.2, not {moto.__version__}: pip install 'moto[server]==5.2.1'")
from moto.dynamodb import responses as dynamodb
from moto.sqs import responses as sqs, models as sqsmodels
from moto.core.responses import BaseResponse

# With BULLPEN_MOTO_TIMINGS set to a path, the time each action held its
# service's lock is written there as JSON when the emulator is stopped.
import atexit, json, os
timings_path = os.environ.get("BULLPEN_MOTO_TIMINGS")
spent = {}

def one_at_a_time(handler, lock):
    unlocked = handler.call_action
    def call_action(self):
        with lock:
            began = time.perf_counter()
            try:
                return unlocked(self)
            finally:
                if timings_path:
                    key = type(self).__name__ + "." + self._get_action()
                    calls, seconds = spent.get(key, (0, 0.0))
                    spent[key] = (calls + 1, seconds + time.perf_counter() - began)
    handler.call_action = call_action

# moto's own SIGTERM handler exits through SystemExit, which runs atexit.
def write_timings():
    if timings_path:
        with open(timings_path, "w") as f:
            json.dump({k: {"calls": c, "seconds": round(s, 3)} for k, (c, s) in sorted(spent.items())}, f, indent=1)
atexit.register(write_timings)

one_at_a_time(dynamodb.DynamoHandler, threading.Lock())
sqs_lock = threading.RLock()
one_at_a_time(sqs.SQSResponse, sqs_lock)

# Time a test can set on the SQS queues under a name prefix of its own.
# PUT /_bullpen/sqs-time?prefix=P&ms=N sets it: from then on moto's SQS
# model reads N milliseconds since the epoch for the queues under P (send
# times, delays, visibility timeouts, a long poll's end, the deduplication
# window), until the next PUT; DELETE gives them real time again. Queues
# under other prefixes keep real time, so tests in real time run beside
# one on a set clock.
class QueueClock:
    def __init__(self, ms):
        self.ms = ms
        self.closed = False
        self.lock = threading.Lock()
        self.waiting = []  # the conditions its queues' long polls wait on

    def set(self, ms):
        self.ms = ms
        self.wake()

    def wake(self):
        with self.lock:
            waiting = list(self.waiting)
        for cond in waiting:
            with cond:
                cond.notify_all()

clocks = {}  # prefix → QueueClock
clocks_lock = threading.Lock()
this_request = threading.local()  # clock: its queue's QueueClock or None; poll: its poll id

def clock_of(queue_name):
    # The longest prefix wins, should one test's prefix begin another's.
    with clocks_lock:
        matching = [p for p in clocks if queue_name.startswith(p)]
        return clocks[max(matching, key=len)] if matching else None

def set_clock(prefix, ms):
    with clocks_lock:
        clock = clocks.get(prefix)
        if clock is None:
            clocks[prefix] = QueueClock(ms)
            return
    clock.set(ms)

def drop_clock(prefix):
    with clocks_lock:
        clock = clocks.pop(prefix, None)
    if clock is not None:
        clock.closed = True
        clock.wake()

real_unix_time = sqsmodels.unix_time
def queue_unix_time(dt=None):
    clock = getattr(this_request, "clock", None)
    if dt is not None or clock is None:
        return real_unix_time(dt)
    return clock.ms / 1000

def queue_unix_time_millis(dt=None):
    clock = getattr(this_request, "clock", None)
    if dt is not None or clock is None:
        return real_unix_time(dt) * 1000
    return float(clock.ms)

sqsmodels.unix_time = queue_unix_time
sqsmodels.unix_time_millis = queue_unix_time_millis

def on_queue_clock(call_action):
    def call(self):
        try:
            name = self._get_param("QueueName") or self._get_queue_name()
        except Exception:
            name = None
        this_request.clock = clock_of(name) if name else None
        this_request.poll = self.headers.get("X-Bullpen-Poll")
        try:
            return call_action(self)
        finally:
            this_request.clock = this_request.poll = None
    return call
sqs.SQSResponse.call_action = on_queue_clock(sqs.SQSResponse.call_action)

# A test on a set clock moves it once a long poll waits: a ReceiveMessage
# carrying X-Bullpen-Poll: ID is reported by GET /_bullpen/sqs-poll?id=ID,
# which answers "parked" once the poll waits, or "done" if it returned
# without waiting.
from collections import OrderedDict
class Polls:
    def __init__(self):
        self.state = OrderedDict()     # poll → its first state, until asked
        self.answered = OrderedDict()  # polls asked about: later marks are dropped
        self.changed = threading.Condition()

    def mark(self, poll, state):
        if not poll:
            return
        with self.changed:
            if poll not in self.state and poll not in self.answered:
                self.state[poll] = state
                trim(self.state)  # answers nobody asked for
            self.changed.notify_all()

    def wait(self, poll, timeout):
        with self.changed:
            self.changed.wait_for(lambda: poll in self.state, timeout)
            self.answered[poll] = True
            trim(self.answered)
            return self.state.pop(poll, None)

def trim(d, keep=10000):
    while len(d) > keep:
        d.popitem(last=False)
polls = Polls()

# moto's long poll computes its end once and checks it after each wait of
# a second on its queue's condition, which only a send notifies. Here a
# long poll is moto's receive without a wait, repeated: between turns it
# waits on the same condition, which a move of its queue's clock notifies
# too, and it ends once its wait has passed on its queue's clock. While it
# waits it lets go of SQS's lock, as SQS serves other calls meanwhile.
receive_now = sqsmodels.SQSBackend.receive_message
def receive_message(self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names=None):
    clock, poll = getattr(this_request, "clock", None), getattr(this_request, "poll", None)
    end = sqsmodels.unix_time() + wait_seconds_timeout
    try:
        while True:
            result = receive_now(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            if result or sqsmodels.unix_time() >= end or (clock is not None and clock.closed):
                return result
            polls.mark(poll, "parked")
            wait_turn(self.get_queue(queue_name), clock, end)
    finally:
        polls.mark(poll, "done")
sqsmodels.SQSBackend.receive_message = receive_message

def wait_turn(queue, clock, end):
    sqs_lock.release()
    try:
        # moto counts a FIFO group's messages held back behind one in
        # flight as available, so the wait returns at once while there are
        # any and the poll would spin: let the other requests in between.
        time.sleep(0.05)
        cond = queue._messages_lock
        ready = lambda: queue.messages or sqsmodels.unix_time() >= end or (clock is not None and clock.closed)
        with cond:
            if clock is None:
                cond.wait_for(ready, timeout=1)
                return
            with clock.lock:
                clock.waiting.append(cond)
            try:
                cond.wait_for(ready, timeout=1)
            finally:
                with clock.lock:
                    clock.waiting.remove(cond)
    finally:
        sqs_lock.acquire()

# A visibility timeout of d seconds set at t has run out at t + d, as a
# delay of d has: moto's strict comparison hides the message for the
# millisecond of its end, which a set clock never leaves, so that a
# timeout of 0 would never end.
sqsmodels.Message.visible = property(lambda m: sqsmodels.unix_time_millis() >= m.visible_at)

# SQS: "If a message with a particular message deduplication ID is sent
# successfully, any messages sent with the same message deduplication ID
# are accepted successfully but aren't delivered during the 5-minute
# deduplication interval." moto compares an id with the messages still in
# the queue only, so it forgets an id once its message is deleted: each
# FIFO queue remembers here when it last accepted each id.
add_message = sqsmodels.Queue.add_message
def add_deduplicated(self, message):
    dedup_id = message.deduplication_id
    if self.fifo_queue and dedup_id:
        window = sqsmodels.DEDUPLICATION_TIME_IN_SECONDS * 1000
        # In the order accepted, so the expired ones are at the front.
        accepted = self.__dict__.setdefault("accepted_dedup_ids", OrderedDict())
        while accepted and message.sent_timestamp - next(iter(accepted.values())) >= window:
            accepted.popitem(last=False)
        if dedup_id in accepted:
            return
        accepted[dedup_id] = message.sent_timestamp
    add_message(self, message)
sqsmodels.Queue.add_message = add_deduplicated

# SQS gives each receive of a message a new receipt handle, "associated
# with a specific instance of receiving a message", and changes the
# visibility of a message in flight only: with the receipt of an earlier
# receive, or once the message is visible again, ChangeMessageVisibility
# is refused. moto takes any receipt the message ever had.
change_visibility = sqsmodels.SQSBackend.change_message_visibility
def change_current_visibility(self, queue_name, receipt_handle, visibility_timeout):
    for message in self.get_queue(queue_name)._messages:
        if message.had_receipt_handle(receipt_handle) and (message.receipt_handle != receipt_handle or message.visible):
            raise sqsmodels.InvalidParameterValue(
                f"Value {receipt_handle} for parameter ReceiptHandle is invalid. "
                "Reason: Message does not exist or is not available for visibility timeout change.")
    return change_visibility(self, queue_name, receipt_handle, visibility_timeout)
sqsmodels.SQSBackend.change_message_visibility = change_current_visibility

# The routes a test sets its SQS time with, beside moto's own.
import moto.server
from urllib.parse import parse_qs
def test_route(environ, start_response):
    query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
    method, path = environ["REQUEST_METHOD"], environ["PATH_INFO"]
    status, body = "404 Not Found", b""
    if path == "/_bullpen/sqs-time" and "prefix" in query:
        if method == "PUT" and "ms" in query:
            set_clock(query["prefix"], int(query["ms"]))
            status = "204 No Content"
        elif method == "DELETE":
            drop_clock(query["prefix"])
            status = "204 No Content"
    elif path == "/_bullpen/sqs-poll" and method == "GET" and "id" in query:
        state = polls.wait(query["id"], 60)
        status, body = ("200 OK", state.encode()) if state else ("504 Gateway Timeout", b"")
    start_response(status, [("Content-Length", str(len(body)))])
    return [body]

class WithTestRoutes(moto.server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO", "").startswith("/_bullpen/"):
            return test_route(environ, start_response)
        return super().__call__(environ, start_response)
moto.server.DomainDispatcherApplication = WithTestRoutes


# moto backs up each table a transaction touches with a deep copy, once
# per item, to roll back a cancelled one; the copy grows with the table
# and was most of the emulator's time under the replicas test. With
# DynamoDB's requests one at a time, a transaction whose conditions all
# hold beforehand cannot be cancelled by them, so it runs without the
# copy; any other goes through moto's own path.
import copy
import moto.dynamodb.models as dynamodb_models
from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.models.table import Table

class tables_uncopied:
    def __getattr__(self, name):
        return getattr(copy, name)
    def deepcopy(self, x, memo=None):
        return x if isinstance(x, Table) else copy.deepcopy(x, memo)

def condition_holds(backend, item):
    op_type, op = next(iter(item.items()))
    condition = op.get("ConditionExpression")
    if condition is None:
        return True
    if op_type == "Put":
        table = backend.get_table(op["TableName"])
        key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
        if table.range_key_attr is not None:
            key[table.range_key_attr] = op["Item"][table.range_key_attr]
    else:
        key = op["Key"]
    current = backend.get_item(op["TableName"], key)
    return get_filter_expression(condition, op.get("ExpressionAttributeNames"), op.get("ExpressionAttributeValues")).expr(current)

transact = dynamodb_models.DynamoDBBackend.transact_write_items
def transact_write_items(self, transact_items):
    try:
        holds = all(condition_holds(self, item) for item in transact_items)
    except Exception:
        holds = False
    if not holds:
        return transact(self, transact_items)
    dynamodb_models.copy = tables_uncopied()
    try:
        return transact(self, transact_items)
    finally:
        dynamodb_models.copy = copy
dynamodb_models.DynamoDBBackend.transact_write_items = transact_write_items

# DynamoDB answers a TransactWriteItems sent again with the same client
# request token within ten minutes as it answered the first, without
# applying it twice; the SDK fills the token once per call and resends it
# with each retry. moto ignores the token, so a transaction whose answer
# was lost would be refused on retry by its own first write.
from collections import OrderedDict
from moto.dynamodb.exceptions import DynamodbException, ERROR_TYPE_PREFIX
from moto.core.responses import ActionResult
transactions_done = OrderedDict()
transact_response = dynamodb.DynamoHandler.transact_write_items
def transact_once(self):
    token = self.body.get("ClientRequestToken")
    if token is None:
        return transact_response(self)
    now = time.monotonic()
    while transactions_done and now - next(iter(transactions_done.values()))[0] > 600:
        transactions_done.popitem(last=False)
    items = json.dumps(self.body["TransactItems"], sort_keys=True)
    done = transactions_done.get(token)
    if done is not None:
        if done[1] != items:
            raise DynamodbException(ERROR_TYPE_PREFIX + "IdempotentParameterMismatchException",
                "The request uses the same client token as a previous, but non-identical request.")
        return ActionResult({"ConsumedCapacity": [], "ItemCollectionMetrics": {}})
    answer = transact_response(self)
    transactions_done[token] = (now, items)
    return answer
dynamodb.DynamoHandler.transact_write_items = transact_once

# moto lists its own package directory, under a process-wide lock, to
# route every request; the list never changes while it runs.
import logging, moto.backends
modules = tuple(moto.backends.list_of_moto_modules())
moto.backends.list_of_moto_modules = lambda: modules
logging.getLogger("werkzeug").setLevel(logging.ERROR)

from moto.server import main
main(sys.argv[1:])
