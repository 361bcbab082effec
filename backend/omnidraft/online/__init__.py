"""The contract between serving and training: records, the outbox, the drafter registry, rates."""
