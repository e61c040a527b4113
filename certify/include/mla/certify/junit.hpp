// The certificate as JUnit XML, for CI systems that display test results: one <testsuite> per
// kernel, one <testcase> per (kernel, case), FAIL as <failure>, ERROR as <error>, UNSUPPORTED
// and SKIPPED as <skipped>, every reason in the body.
#pragma once

#include <string>

#include "mla/reports/certificate.hpp"

namespace mla::certify {

std::string to_junit(const reports::Certificate& c);
// XML text/attribute escaping (&, <, >, ", ') and removal of characters XML 1.0 forbids.
std::string xml_escape(const std::string& s);

}  // namespace mla::certify
