#pragma once
// being written this session
