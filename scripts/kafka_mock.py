"""librdkafka's mock cluster as a stand-in Kafka broker, for scripts/kafka.sh.

Used only where Apache Kafka's jars cannot be fetched (a machine that reaches no Maven
repository). librdkafka (in confluent-kafka's wheel) serves the Kafka protocol from this
process: produce, fetch, list offsets, metadata, consumer groups and offset commits, in
memory, on 127.0.0.1 at a port it picks. Topics are created when first used, with 4
partitions, and a partition drops its oldest messages once it holds a few MB (some 100,000
small JSON messages), as if by retention: tests keep their partitions under that. Prints
`127.0.0.1:PORT` once it answers, then serves until killed.
"""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Producer


def main() -> None:
    # A client with `test.mock.num.brokers` starts the mock cluster in this process; the
    # brokers' address is the one its metadata names.
    owner = Producer({"test.mock.num.brokers": 1, "bootstrap.servers": "", "log_level": 3})
    brokers = owner.list_topics(timeout=30).brokers
    broker = next(iter(brokers.values()))
    print(f"{broker.host}:{broker.port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        owner.poll(1.0)


if __name__ == "__main__":
    main()
