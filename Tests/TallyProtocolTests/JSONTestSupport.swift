import Testing
@testable import TallyProtocol

/// Parses `text`, returning the error (or nil) so tables can compare kinds and offsets.
func parseError(_ text: String, limits: JSONLimits = JSONLimits()) -> JSONError? {
    parseError(Array(text.utf8), limits: limits)
}

func parseError(_ bytes: [UInt8], limits: JSONLimits = JSONLimits()) -> JSONError? {
    do {
        _ = try JSONValue.parse(bytes, limits: limits)
        return nil
    } catch {
        return error
    }
}

/// The RFC 8259 §13 examples, verbatim.
enum RFC8259 {
    static let image = """
        {
          "Image": {
              "Width":  800,
              "Height": 600,
              "Title":  "View from 15th Floor",
              "Thumbnail": {
                  "Url":    "http://www.example.com/image/481989943",
                  "Height": 125,
                  "Width":  100
              },
              "Animated" : false,
              "IDs": [116, 943, 234, 38793]
            }
        }
        """

    static let places = """
        [
          {
             "precision": "zip",
             "Latitude":  37.7668,
             "Longitude": -122.3959,
             "Address":   "",
             "City":      "SAN FRANCISCO",
             "State":     "CA",
             "Zip":       "94107",
             "Country":   "US"
          },
          {
             "precision": "zip",
             "Latitude":  37.371991,
             "Longitude": -122.026020,
             "Address":   "",
             "City":      "SUNNYVALE",
             "State":     "CA",
             "Zip":       "94085",
             "Country":   "US"
          }
        ]
        """
}
