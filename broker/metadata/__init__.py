"""What this broker knows of topics, partitions and brokers, and the admin operations that change it."""
