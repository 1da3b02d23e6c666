/// The sync protocol's value types (JSON, record paths) arrive with the sync engine issue.
enum TallyProtocolModule {}
