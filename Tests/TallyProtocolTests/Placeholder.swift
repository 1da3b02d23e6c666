import Testing
@testable import TallyProtocol

@Test func moduleBuilds() {}
