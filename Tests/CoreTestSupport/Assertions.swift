import XCTest

/// Asserts that `body` throws exactly `expected` (and says what it returned or threw instead).
public func assertThrows<E: Error & Equatable, T>(_ expected: E, file: StaticString = #filePath, line: UInt = #line,
                                                  _ body: () throws -> T) {
    do {
        let value = try body()
        XCTFail("expected \(expected), got \(value)", file: file, line: line)
    } catch let error as E {
        XCTAssertEqual(error, expected, file: file, line: line)
    } catch {
        XCTFail("expected \(expected), got \(error)", file: file, line: line)
    }
}
