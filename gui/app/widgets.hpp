// Small widget helpers shared by the explorer's window files.
#pragma once

#include <string_view>

#include <QString>

class QAbstractItemModel;
class QComboBox;
class QLabel;
class QSpinBox;
class QTableView;

namespace preflight::gui {

QString sv(std::string_view s);
// A combo box of a plan field's names (plan_schema.hpp); each item's data is its position,
// which is the enum's value (the table lists every enum's names in declaration order).
void fillChoices(QComboBox* box, std::string_view key);
// A combo box of the ZeRO stages the plan field allows ("ZeRO-0" ... "ZeRO-3"), data = the stage.
void fillStages(QComboBox* box, std::string_view key);
// A spin box that evaluates once per typed number (no keyboard tracking), digits grouped.
QSpinBox* spin(const char* name, int lo, int hi, int value, int step = 1);
QTableView* table(const char* name, QAbstractItemModel* model);
// A selectable label; `big`: bold, 1.45 times the font size.
QLabel* value_label(const char* name, bool big = false);

}  // namespace preflight::gui
