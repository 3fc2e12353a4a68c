#include "format/criteo_line.h"

#include <cstring>
#include <string>

namespace gpufeed {
namespace {

constexpr uint32_t kCriteoFields = 1 + kCriteoDense + kCriteoSparse;
constexpr size_t kMaxHexDigits = 16;
// A decimal magnitude of at most this many digits cannot overflow int64.
constexpr size_t kSafeDecimalDigits = 18;
// How much of an offending field an error message quotes.
constexpr size_t kQuotedBytes = 32;

// Byte -> hex digit value, or -1 for a byte that is not one.
struct HexTable {
  int8_t value[256];
  constexpr HexTable() : value() {
    for (int i = 0; i < 256; ++i) value[i] = -1;
    for (int i = 0; i < 10; ++i) value['0' + i] = static_cast<int8_t>(i);
    for (int i = 0; i < 6; ++i) {
      value['a' + i] = static_cast<int8_t>(10 + i);
      value['A' + i] = static_cast<int8_t>(10 + i);
    }
  }
};
constexpr HexTable kHex;

inline uint32_t DecimalDigit(char c) {
  return static_cast<uint32_t>(static_cast<uint8_t>(c) - '0');
}

// Parses [sign] digits starting at `*cursor`, stopping at the first byte
// that is not a digit (or at `end`). Returns false, leaving `*cursor` at the
// field's start, for a sign without digits or a value outside int64; sets
// `*empty` when the field has neither sign nor digits.
// REQUIRES: *cursor <= end.
inline bool ParseDecimal(const char** cursor, const char* end, int64_t* value, bool* empty) {
  const char* const start = *cursor;
  const char* p = start;
  bool negative = false;
  if (p < end && (*p == '-' || *p == '+')) {
    negative = *p == '-';
    ++p;
  }
  const char* const digits = p;
  uint64_t magnitude = 0;  // wraps past 19 digits; checked below
  while (p < end && DecimalDigit(*p) < 10) magnitude = magnitude * 10 + DecimalDigit(*p++);
  const size_t count = static_cast<size_t>(p - digits);
  *empty = p == start;
  if (count == 0) return *empty;
  if (count > kSafeDecimalDigits) {
    const uint64_t limit = negative ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
    magnitude = 0;
    for (const char* q = digits; q < p; ++q) {
      const uint32_t digit = DecimalDigit(*q);
      if (magnitude > (limit - digit) / 10) return false;
      magnitude = magnitude * 10 + digit;
    }
  }
  // Two's complement negation of the magnitude: exact for INT64_MIN too.
  *value = static_cast<int64_t>(negative ? uint64_t{0} - magnitude : magnitude);
  *cursor = p;
  return true;
}

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the 8-digit hex path reads the first character from the lowest byte");

// A byte 0x80 in each lane of `word` whose byte lies strictly between
// `low` and `high`, 0 elsewhere; exact per byte (no carry crosses a lane).
// REQUIRES: low <= 127, high <= 128.
constexpr uint64_t BytesBetween(uint64_t word, uint64_t low, uint64_t high) {
  constexpr uint64_t kOnes = 0x0101010101010101ull;
  const uint64_t seven_bits = word & kOnes * 127;
  return (kOnes * (127 + high) - seven_bits) & ~word & (seven_bits + kOnes * (127 - low)) &
         kOnes * 128;
}

// True when all 8 bytes of `word` are hex digits (either case).
constexpr bool AllHex(uint64_t word) {
  constexpr uint64_t kCaseBit = 0x2020202020202020ull;
  const uint64_t digits = BytesBetween(word, '0' - 1, '9' + 1);
  const uint64_t letters = BytesBetween(word | kCaseBit, 'a' - 1, 'f' + 1);
  return (digits | letters) == 0x8080808080808080ull;
}

// The value of 8 hex digits, the first in the lowest byte.
// REQUIRES: AllHex(word).
constexpr uint64_t HexValue(uint64_t word) {
  // Each byte to its nibble: the low 4 bits, plus 9 for a letter (bit 6).
  uint64_t v = (word & 0x0f0f0f0f0f0f0f0full) + ((word >> 6) & 0x0101010101010101ull) * 9;
  v = ((v << 4) | (v >> 8)) & 0x00ff00ff00ff00ffull;  // pairs of nibbles to bytes
  v = ((v << 8) | (v >> 16)) & 0x0000ffff0000ffffull;
  return ((v << 16) | (v >> 32)) & 0xffffffffull;
}

// Parses hex digits starting at `*cursor` up to the first other byte.
// Returns false for more than 16 digits. REQUIRES: *cursor <= end.
inline bool ParseHex(const char** cursor, const char* end, uint64_t* value) {
  const char* const start = *cursor;
  const char* p = start;
  uint64_t result = 0;
  // Criteo's ids are 8 digits: take them in one word when they are there.
  if (end - p >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    if (AllHex(word)) {
      result = HexValue(word);
      p += 8;
    }
  }
  int8_t digit;
  while (p < end && (digit = kHex.value[static_cast<uint8_t>(*p)]) >= 0) {
    result = (result << 4) | static_cast<uint64_t>(digit);
    ++p;
  }
  if (static_cast<size_t>(p - start) > kMaxHexDigits) return false;
  *value = result;
  *cursor = p;
  return true;
}

// True when the field ended where a separator (or the line's end, for the
// last field) belongs; moves past the tab.
inline bool EndOfField(const char** cursor, const char* end, uint32_t field) {
  if (field + 1 == kCriteoFields) return *cursor == end;
  if (*cursor == end || **cursor != '\t') return false;
  ++*cursor;
  return true;
}

std::string FieldName(uint32_t field) {
  std::string name = field == 0              ? std::string("label")
                     : field <= kCriteoDense ? "I" + std::to_string(field)
                                             : "C" + std::to_string(field - kCriteoDense);
  return "field " + name + " (column " + std::to_string(field + 1) + ")";
}

// The field's first bytes in quotes, non-printable bytes as \xNN.
std::string Quote(const char* begin, const char* end) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out = "'";
  const size_t length = static_cast<size_t>(end - begin);
  for (size_t i = 0; i < length && i < kQuotedBytes; ++i) {
    const uint8_t c = static_cast<uint8_t>(begin[i]);
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kDigits[c >> 4];
      out += kDigits[c & 15];
    }
  }
  out += length > kQuotedBytes ? "'..." : "'";
  return out;
}

bool AllOf(const char* begin, const char* end, bool (*accept)(uint8_t)) {
  for (const char* p = begin; p < end; ++p) {
    if (!accept(static_cast<uint8_t>(*p))) return false;
  }
  return true;
}

// The error for a line whose field `field`, starting at `start`, did not
// parse. A wrong field count is named first: it is what shifted the field.
// Off the hot path: only a bad line comes here.
Status FieldError(const char* line, const char* end, uint32_t field, const char* start) {
  size_t tabs = 0;
  for (const char* p = line; p < end; ++p) tabs += *p == '\t';
  if (tabs + 1 != kCriteoFields) {
    return Status::Corruption(std::to_string(tabs + 1) + " fields, expected " +
                              std::to_string(kCriteoFields));
  }
  const void* tab = std::memchr(start, '\t', static_cast<size_t>(end - start));
  const char* field_end = tab != nullptr ? static_cast<const char*>(tab) : end;
  const std::string where = FieldName(field) + ": ";
  const std::string quoted = Quote(start, field_end);
  if (field == 0 && field_end == start) return Status::Corruption(where + "the label is empty");
  if (field > kCriteoDense) {
    const bool hex = AllOf(start, field_end, [](uint8_t c) { return kHex.value[c] >= 0; });
    if (hex) return Status::Corruption(where + quoted + " has more than 16 hex digits");
    return Status::Corruption(where + quoted + " is not hexadecimal");
  }
  const char* digits = start;
  if (digits < field_end && (*digits == '-' || *digits == '+')) ++digits;
  const bool integer = digits < field_end &&
                       AllOf(digits, field_end, [](uint8_t c) { return DecimalDigit(c) < 10; });
  if (integer) return Status::Corruption(where + quoted + " overflows int64");
  return Status::Corruption(where + quoted + " is not an integer");
}

}  // namespace

// On failure *row holds whatever fields were parsed before the bad one.
Status ParseCriteoLine(const char* line, size_t length, CriteoRow* row) {
  if (length > 0 && line[length - 1] == '\n') {
    --length;
    if (length > 0 && line[length - 1] == '\r') --length;
  }
  const char* const end = line + length;
  const char* p = line;
  const char* start = p;
  bool empty = false;
  if (!ParseDecimal(&p, end, &row->label, &empty) || empty || !EndOfField(&p, end, 0)) {
    return FieldError(line, end, 0, start);
  }
  uint32_t missing = 0;
  for (uint32_t i = 0; i < kCriteoDense; ++i) {
    start = p;
    if (!ParseDecimal(&p, end, &row->dense[i], &empty)) return FieldError(line, end, 1 + i, start);
    if (empty) {
      row->dense[i] = 0;
      missing |= uint32_t{1} << i;
    }
    if (!EndOfField(&p, end, 1 + i)) return FieldError(line, end, 1 + i, start);
  }
  row->dense_missing = missing;
  missing = 0;
  for (uint32_t i = 0; i < kCriteoSparse; ++i) {
    const uint32_t field = 1 + kCriteoDense + i;
    start = p;
    if (!ParseHex(&p, end, &row->sparse[i])) return FieldError(line, end, field, start);
    missing |= static_cast<uint32_t>(p == start) << i;
    if (!EndOfField(&p, end, field)) return FieldError(line, end, field, start);
  }
  row->sparse_missing = missing;
  return Status::OK();
}

}  // namespace gpufeed
