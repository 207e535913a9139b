#include "ptx_entries.h"

#include <sstream>

namespace emu {
namespace {

// Bytes of a PTX scalar type: the digits of .u64, .f32, .b8 ... divided by 8.
unsigned type_bytes(const std::string& type) {
    const size_t digits = type.find_first_of("0123456789");
    return digits == std::string::npos ? 0 : unsigned(std::stoul(type.substr(digits)) / 8);
}

// One `.param [.align N] .type name[count]` declaration, as its size in bytes.
unsigned param_bytes(const std::string& declaration) {
    std::istringstream words(declaration);
    std::string word, type, name;
    words >> word;  // .param
    words >> type;
    if (type == ".align") words >> word >> type;
    words >> name;
    unsigned count = 1;
    const size_t open = name.find('[');
    if (open != std::string::npos) count = unsigned(std::stoul(name.substr(open + 1)));
    return type_bytes(type) * count;
}

}  // namespace

std::vector<PtxEntry> ptx_entries(const std::string& ptx) {
    std::vector<PtxEntry> entries;
    for (size_t at = ptx.find(".entry "); at != std::string::npos; at = ptx.find(".entry ", at + 1)) {
        const size_t open = ptx.find('(', at);
        const size_t close = ptx.find(')', open);
        if (open == std::string::npos || close == std::string::npos) break;
        PtxEntry entry;
        std::istringstream name(ptx.substr(at + 7, open - at - 7));
        name >> entry.name;
        std::istringstream params(ptx.substr(open + 1, close - open - 1));
        for (std::string declaration; std::getline(params, declaration, ',');) {
            if (declaration.find(".param") != std::string::npos)
                entry.param_sizes.push_back(param_bytes(declaration));
        }
        entries.push_back(std::move(entry));
    }
    return entries;
}

}  // namespace emu
