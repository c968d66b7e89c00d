import sys, threading, time
from moto.dynamodb import responses as dynamodb
from moto.sqs import responses as sqs, models as sqsmodels
from moto.core.responses import BaseResponse

# With BULLPEN_MOTO_TIMINGS set to a path, the time each action held its
# service's lock is written there as JSON when the emulator is stopped.
import json, os, signal
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

def write_timings(*_):
    if timings_path:
        with open(timings_path, "w") as f:
            json.dump({k: {"calls": c, "seconds": round(s, 3)} for k, (c, s) in sorted(spent.items())}, f, indent=1)
    os._exit(0)
signal.signal(signal.SIGTERM, write_timings)

one_at_a_time(dynamodb.DynamoHandler, threading.Lock())
sqs_lock = threading.RLock()
one_at_a_time(sqs.SQSResponse, sqs_lock)
waiting = sqsmodels.Queue.wait_for_messages
def wait_for_messages(self, timeout):
    sqs_lock.release()
    try:
        # moto's wait returns at once while any message is visible, even
        # one a FIFO group holds back, and its long poll then spins: let
        # the other requests in between turns.
        time.sleep(0.05)
        return waiting(self, timeout)
    finally:
        sqs_lock.acquire()
sqsmodels.Queue.wait_for_messages = wait_for_messages

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
