// See declarations.h: Gloo names for torch's ProcessGroupGloo.hpp, nothing more.
#pragma once
#include <gloo/declarations.h>
