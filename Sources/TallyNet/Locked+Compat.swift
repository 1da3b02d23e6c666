import TallyConcurrency

/// The old name of `LockedValueBox`, kept only for
/// `Sources/TallyBench/BrokerProcess.swift`, which is being rewritten
/// elsewhere at the moment; remove once it says `LockedValueBox`.
public typealias Locked<Value> = LockedValueBox<Value>
