"""Spark and Strom: the ``stromkafka`` Python data source and the click-stream pipeline.

``tools.spark.offsets`` and ``tools.spark.options`` are pure code (no Spark, no client);
``tools.spark.source`` needs PySpark (4.2 or later), ``tools.spark.kafka_io`` confluent-kafka.
"""
